"""Checking a worker token never fails on what a header may carry."""

from __future__ import annotations

import pytest

from skiff.domain.keys import check_worker_token, worker_token

SECRET = b"s" * 32


def test_the_endpoints_own_token_checks_out() -> None:
    assert check_worker_token(SECRET, "ep1", worker_token(SECRET, "ep1"))


@pytest.mark.parametrize("token", ["skw_\xff\xfe", "ümlaut", "\udfff", "", "skw_ep1_\x00"])
def test_a_token_with_bytes_beyond_ascii_is_simply_wrong(token: str) -> None:
    # hmac.compare_digest raises TypeError on such str: that was a 500.
    assert check_worker_token(SECRET, "ep1", token) is False
