"""Job ids: shaped like the reference's (a UUID and ``-u1``), in submission order, unguessable."""

from __future__ import annotations

import uuid

from skiff.ids import job_id, time_ordered_uuid


def test_a_job_id_is_a_uuid_with_the_references_suffix() -> None:
    plain, sync = job_id(sync=False), job_id(sync=True)
    assert plain.endswith("-u1") and sync.startswith("sync-") and sync.endswith("-u1")
    parsed = uuid.UUID(plain.removesuffix("-u1"))
    assert parsed.version == 7
    assert parsed.variant == uuid.RFC_4122


def test_ids_of_later_milliseconds_sort_after_earlier_ones() -> None:
    ids = [str(time_ordered_uuid(now_ms=ms)) for ms in (1_700_000_000_000, 1_700_000_000_001)]
    ids += [str(time_ordered_uuid(now_ms=1_800_000_000_000 + n * 1000)) for n in range(50)]
    assert ids == sorted(ids)


def test_ids_of_one_millisecond_still_differ() -> None:
    ids = {time_ordered_uuid(now_ms=1_700_000_000_000) for _ in range(1000)}
    assert len(ids) == 1000


def test_the_time_prefix_reads_back_as_the_milliseconds_given() -> None:
    made = time_ordered_uuid(now_ms=1_763_856_000_123)
    assert made.int >> 80 == 1_763_856_000_123
