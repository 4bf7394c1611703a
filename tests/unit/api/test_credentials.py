"""Reading the caller's key or token from the ``Authorization`` header."""

from __future__ import annotations

import pytest

from skiff.api.credentials import api_key, worker_token
from skiff.errors import Unauthorized


@pytest.mark.parametrize("header", ["Bearer sk_1", "bearer sk_1", "BEARER  sk_1 ", " Bearer sk_1"])
def test_a_bearer_header_names_its_key_in_any_case(header: str) -> None:
    assert api_key(header) == "sk_1"
    assert api_key(header, bare_ok=True) == "sk_1"


def test_the_key_alone_is_taken_on_v2_only() -> None:
    assert api_key("sk_1", bare_ok=True) == "sk_1"
    with pytest.raises(Unauthorized, match="the key alone is accepted on /v2 only"):
        api_key("sk_1")


@pytest.mark.parametrize("header", ["Bearer", "Bearer  ", "Basic sk_1"])
def test_v1_refuses_a_header_that_is_not_bearer_and_a_key(header: str) -> None:
    with pytest.raises(Unauthorized, match="send the API key as 'Authorization: Bearer <key>'"):
        api_key(header)


@pytest.mark.parametrize("header", [None, ""])
def test_a_missing_key_says_how_to_send_one(header: str | None) -> None:
    for bare_ok in (False, True):
        with pytest.raises(Unauthorized, match="missing API key"):
            api_key(header, bare_ok=bare_ok)


def test_an_empty_bearer_on_v2_is_read_as_a_key_the_auth_service_refuses() -> None:
    # Not "missing": the header is there, and what it names is no key anyone holds.
    assert api_key("Bearer ", bare_ok=True) == "Bearer"


def test_a_worker_token_comes_alone_or_after_bearer() -> None:
    assert worker_token("tok") == "tok"
    assert worker_token("Bearer tok") == "tok"
    for header in (None, ""):
        with pytest.raises(Unauthorized, match="missing worker token"):
            worker_token(header)
