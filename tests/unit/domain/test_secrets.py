"""References to secrets in an environment: found in the hosted platform's syntax (spaces
inside the braces optional, other text around kept), checked, and resolved."""

from __future__ import annotations

import pytest

from skiff.domain.secrets import missing_references, references, refers_to, resolve, valid_name
from skiff.errors import Invalid


@pytest.mark.parametrize(
    "written",
    [
        "{{ RUNPOD_SECRET_hf_token }}",
        "{{RUNPOD_SECRET_hf_token}}",
        "{{  RUNPOD_SECRET_hf_token\t}}",
        "prefix-{{ RUNPOD_SECRET_hf_token }}-suffix",
    ],
)
def test_a_reference_is_found_with_or_without_spaces(written: str) -> None:
    assert references({"A": written}) == {"hf_token"}


@pytest.mark.parametrize(
    "written",
    ["RUNPOD_SECRET_hf_token", "{ RUNPOD_SECRET_hf_token }", "{{ RUNPOD_SECRET_ }}", "{{ x }}"],
)
def test_text_that_is_no_reference_is_left_alone(written: str) -> None:
    assert references({"A": written}) == set()
    assert resolve({"A": written}, {"hf_token": "v"}) == {"A": written}


def test_every_reference_in_a_value_is_replaced_and_the_rest_kept() -> None:
    env = {
        "URL": "https://{{ RUNPOD_SECRET_user }}:{{RUNPOD_SECRET_pw}}@host/",
        "PLAIN": "unchanged",
    }
    resolved = resolve(env, {"user": "me", "pw": "p{a}ss\\1"})
    assert resolved == {"URL": "https://me:p{a}ss\\1@host/", "PLAIN": "unchanged"}


def test_a_reference_to_a_secret_gone_stays_as_written() -> None:
    assert resolve({"A": "{{ RUNPOD_SECRET_gone }}"}, {}) == {"A": "{{ RUNPOD_SECRET_gone }}"}


def test_missing_references_are_named_in_one_error() -> None:
    env = {"A": "{{ RUNPOD_SECRET_b }}", "B": "{{ RUNPOD_SECRET_a }}", "C": "{{RUNPOD_SECRET_ok}}"}
    with pytest.raises(Invalid) as refused:
        missing_references(env, ["ok"], "env")
    assert refused.value.field == "env"
    assert "no secret named a, b" in refused.value.message
    missing_references(env, ["a", "b", "ok"], "env")


def test_refers_to_names_only_the_secrets_given() -> None:
    env = {"A": "{{ RUNPOD_SECRET_a }}"}
    assert refers_to(env, ["a"]) and not refers_to(env, ["b"])


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("hf_token", True),
        ("A.b-c_9", True),
        ("9lives", True),
        ("_x", False),
        ("a b", False),
        ("", False),
        ("a" * 100, True),
        ("a" * 101, False),
        ("é", False),
    ],
)
def test_a_name_is_what_a_reference_can_hold(name: str, valid: bool) -> None:
    assert valid_name(name) is valid
