"""A setting that cannot be read is told in one line: its variable, its value, what is allowed."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from skiff.config import Settings
from skiff.setting_errors import explain


def lines_for(environ: dict[str, str], flags: dict[str, str] | None = None) -> list[str]:
    with pytest.MonkeyPatch.context() as patch:
        for name, value in environ.items():
            patch.setenv(name, value)
        try:
            Settings()
        except ValidationError as exc:
            return explain(exc, Settings, "SKIFF_", environ, flags)
    raise AssertionError("the settings were accepted")


def test_a_choice_in_the_wrong_case_names_the_choices() -> None:
    assert lines_for({"SKIFF_PROVIDER": "Docker"}) == [
        "SKIFF_PROVIDER='Docker' is not allowed: one of 'local', 'docker', 'ray'"
    ]


def test_a_number_that_is_not_one_says_so() -> None:
    assert lines_for({"SKIFF_PORT": "abc"}) == [
        "SKIFF_PORT='abc' is not allowed: a whole number at least 0 and at most 65535"
    ]


def test_every_bound_is_said_not_only_the_one_that_failed() -> None:
    assert lines_for({"SKIFF_TAKE_WAIT_SECONDS": "100"}) == [
        "SKIFF_TAKE_WAIT_SECONDS='100' is not allowed: a number more than 0 and less than 80"
    ]


def test_a_setting_read_by_its_earlier_name_is_named_so() -> None:
    (line,) = lines_for({"SKIFF_TAKE_HOLD_SECONDS": "-1"})
    assert line.startswith("SKIFF_TAKE_HOLD_SECONDS='-1' is not allowed")


def test_each_bad_setting_gets_its_own_line() -> None:
    lines = lines_for({"SKIFF_PROVIDER": "k8s", "SKIFF_SANDBOX": "maybe", "SKIFF_MAX_WORKERS": "0"})
    assert sorted(lines) == [
        "SKIFF_MAX_WORKERS='0' is not allowed: a whole number at least 1, or unset",
        "SKIFF_PROVIDER='k8s' is not allowed: one of 'local', 'docker', 'ray'",
        "SKIFF_SANDBOX='maybe' is not allowed: true or false (also 1/0, yes/no, on/off)",
    ]


def test_a_validators_own_reason_follows_the_rule() -> None:
    (line,) = lines_for({"SKIFF_CONTAINER_PIDS_LIMIT": "5"})
    assert line.startswith("SKIFF_CONTAINER_PIDS_LIMIT='5' is not allowed: a whole number")
    assert "at least 64" in line and "Value error" not in line


def test_a_length_range_reads_as_one() -> None:
    assert lines_for({"SKIFF_RAY_NAMESPACE": ""}) == [
        "SKIFF_RAY_NAMESPACE='' is not allowed: text of 1 to 100 characters"
    ]


def test_a_value_given_by_a_command_line_option_names_the_option() -> None:
    with pytest.raises(ValidationError) as caught:
        Settings(port=-5)
    assert explain(caught.value, Settings, "SKIFF_", {}, {"port": "--port"}) == [
        "--port=-5 is not allowed: a whole number at least 0 and at most 65535"
    ]


def test_a_value_that_may_hold_a_secret_is_not_repeated() -> None:
    with pytest.raises(ValidationError) as caught:
        Settings(api_key=["s3cret"])  # type: ignore[arg-type]
    (line,) = explain(caught.value, Settings, "SKIFF_", {})
    assert "s3cret" not in line and line.startswith("SKIFF_API_KEY=(hidden) is not allowed: text")
