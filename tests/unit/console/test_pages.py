"""Decisions the console's pages make without I/O: what restarts workers, where sign-in goes,
and how times read."""

from __future__ import annotations

from skiff.console.endpoint_pages import ROLLING_LABELS, form_values, rolling_changes
from skiff.console.render import duration
from skiff.console.signin import safe_next
from skiff.domain.endpoints import FIELDS_THAT_ROLL_WORKERS, EndpointSpec


def test_the_form_names_exactly_the_settings_that_restart_workers() -> None:
    assert set(ROLLING_LABELS) == FIELDS_THAT_ROLL_WORKERS


def test_rolling_changes_names_only_what_restarts_workers() -> None:
    before = EndpointSpec(name="a", templateId="t")
    after = before.model_copy(update={"workersMax": 9, "gpuCount": 2, "env": {"A": "1"}})
    assert rolling_changes(before, after) == ["GPU count", "environment"]
    assert rolling_changes(before, before.model_copy(update={"idleTimeout": 60})) == []


def test_form_values_round_the_stored_settings_into_text() -> None:
    spec = EndpointSpec(name="a", templateId="t", gpuTypeIds=["A", "B"], env={"K": "v"})
    values = form_values(spec)
    assert values["gpuTypeIds"] == "A\nB" and values["env"] == "K=v"
    assert values["flashboot"] == ""


def test_sign_in_goes_on_only_to_a_console_path() -> None:
    assert safe_next("/console", "/console/templates") == "/console/templates"
    for elsewhere in ("https://evil.example/", "//evil.example/console/", "/v1/endpoints", None):
        assert safe_next("/console", elsewhere) == "/console/"


def test_durations_read_like_people_say_them() -> None:
    assert [duration(x) for x in (0.09, 1.5, 600, 3725, 90000, 3 * 86400)] == [
        "90 ms",
        "1.5 s",
        "10 min",
        "1 h 2 min",
        "25 h",
        "3 d",
    ]
