"""The stamp in front of every stored log line: UTC, milliseconds, as ``datetime`` writes it."""

from __future__ import annotations

import datetime as dt

import pytest

from skiff.domain.logs import parse, stamp


def _by_datetime(ts: float) -> bytes:
    moment = dt.datetime.fromtimestamp(ts, dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.").encode() + b"%03dZ " % (moment.microsecond // 1000)


@pytest.mark.parametrize(
    "ts",
    [
        0.0,
        1_800_000_000.0,
        1_800_000_000.9995,  # microseconds round up to the next second
        1_800_000_000.999999,
        131_701_179.11199953,  # just below a millisecond after rounding to microseconds
        1_799_999_999.0005,
        2_000_000_000.123456,
    ],
)
def test_a_stamp_reads_as_datetime_formats_the_same_moment(ts: float) -> None:
    assert stamp(ts) == _by_datetime(ts)


def test_stamps_within_one_second_differ_only_in_their_milliseconds() -> None:
    base = 1_800_000_000.0
    assert [stamp(base + ms / 1000)[-5:] for ms in (0, 7, 999)] == [b"000Z ", b"007Z ", b"999Z "]
    assert stamp(base + 1)[:20] != stamp(base)[:20]


def test_a_stamped_line_parses_back_to_its_time_and_text() -> None:
    when, text = parse(stamp(1_800_000_000.25) + b"hello")
    assert when == pytest.approx(1_800_000_000.25) and text == "hello"
