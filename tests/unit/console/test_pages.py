"""Decisions the console's pages make without I/O: what restarts workers, where sign-in goes,
and how times read."""

from __future__ import annotations

from skiff.console.base import _section
from skiff.console.endpoint_pages import ROLLING_LABELS, form_values, rolling_changes
from skiff.console.render import disk, duration
from skiff.console.signin import safe_next
from skiff.console.volume_pages import attached, mounted
from skiff.domain.endpoints import FIELDS_THAT_ROLL_WORKERS, Endpoint, EndpointSpec
from skiff.domain.pods import DesiredStatus, Pod, PodSpec


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
    assert values["networkVolumeId"] == ""
    on_volume = spec.model_copy(update={"networkVolumeId": "vol1"})
    assert form_values(on_volume)["networkVolumeId"] == "vol1"


def test_attaching_a_volume_is_named_as_a_change_that_restarts_workers() -> None:
    before = EndpointSpec(name="a", templateId="t")
    after = before.model_copy(update={"networkVolumeId": "vol1"})
    assert rolling_changes(before, after) == ["network volume"]


def test_each_volume_lists_the_endpoints_that_name_it() -> None:
    def endpoint(eid: str, volume: str | None) -> Endpoint:
        spec = EndpointSpec(name=eid, templateId="t", networkVolumeId=volume)
        return Endpoint(id=eid, userId="u", version=1, createdAt=0.0, spec=spec)

    found = attached([endpoint("a", "v1"), endpoint("b", None), endpoint("c", "v1")])
    assert {volume: [e.id for e in es] for volume, es in found.items()} == {"v1": ["a", "c"]}


def test_each_volume_lists_the_pods_that_mount_it() -> None:
    def pod(pid: str, volume: str | None) -> Pod:
        spec = PodSpec(name=pid, imageName="i", networkVolumeId=volume)
        status = DesiredStatus.RUNNING
        return Pod(
            id=pid, userId="u", spec=spec, desiredStatus=status, createdAt=0, lastStatusChange=0
        )

    found = mounted([pod("a", "v1"), pod("b", None), pod("c", "v2")])
    by_volume = {volume: [p.id for p in ps] for volume, ps in found.items()}
    assert by_volume == {"v1": ["a"], "v2": ["c"]}


def test_the_volumes_pages_are_their_own_section_of_the_navigation() -> None:
    assert _section("/volumes") == "volumes" and _section("/volumes/v1/delete") == "volumes"
    assert _section("/endpoints/e1") == "endpoints"


def test_used_space_reads_in_the_units_of_a_volumes_size() -> None:
    assert [disk(x) for x in (0, 1000, 1536, 5 * 1024**2, 3 * 1024**3, 5000 * 1024**3)] == [
        "0 B",
        "1000 B",
        "1.5 KB",
        "5.0 MB",
        "3.0 GB",
        "5000.0 GB",
    ]


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
