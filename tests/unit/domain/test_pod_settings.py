"""Pod settings: what the create input, the template and the reference's defaults each give, the
checks on ports and mount paths, and which updates need a restart."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from skiff.domain.endpoints import ComputeType
from skiff.domain.pods import (
    DEFAULT_MOUNT_PATH,
    PodCreate,
    PodSpec,
    PodUpdate,
    PortProtocol,
    PortSpec,
    apply_pod_update,
    parse_port,
    spec_from_create,
)
from skiff.domain.templates import Template


def template(**fields: Any) -> Template:
    base: dict[str, Any] = {
        "id": "tpl1",
        "name": "jupyter",
        "imageName": "registry.local/jupyter:1",
        "dockerStartCmd": ["jupyter", "lab"],
        "env": {"A": "template", "B": "template"},
        "ports": ["8888/http"],
        "containerDiskInGb": 30,
        "volumeInGb": 40,
        "volumeMountPath": "/data",
    }
    return Template.model_validate(base | fields)


def test_an_image_alone_gets_the_references_defaults() -> None:
    spec = spec_from_create(PodCreate(imageName="busybox:1"), None)
    assert spec.name == "my pod" and spec.imageName == "busybox:1"
    assert spec.computeType is ComputeType.GPU and spec.gpuCount == 1
    assert (spec.containerDiskInGb, spec.volumeInGb) == (50, 20)
    assert spec.volumeMountPath == DEFAULT_MOUNT_PATH == "/workspace"
    assert spec.ports == [] and spec.env == {} and not spec.locked


def test_a_template_gives_what_the_input_leaves_out_and_env_merges() -> None:
    spec = spec_from_create(
        PodCreate(templateId="tpl1", env={"B": "pod", "C": "pod"}, volumeInGb=60), template()
    )
    assert spec.imageName == "registry.local/jupyter:1" and spec.templateId == "tpl1"
    assert spec.dockerStartCmd == ["jupyter", "lab"] and spec.ports == ["8888/http"]
    assert (spec.containerDiskInGb, spec.volumeInGb, spec.volumeMountPath) == (30, 60, "/data")
    assert spec.env == {"A": "template", "B": "pod", "C": "pod"}


def test_the_inputs_image_overrides_the_templates() -> None:
    spec = spec_from_create(PodCreate(templateId="tpl1", imageName="other:2"), template())
    assert spec.imageName == "other:2"


def test_a_pod_needs_an_image_or_a_template() -> None:
    with pytest.raises(ValidationError, match="imageName or templateId"):
        PodCreate(name="nothing")


def test_a_port_is_a_number_and_http_or_tcp() -> None:
    assert parse_port("8888/http") == PortSpec(8888, PortProtocol.http)
    assert str(parse_port("22/tcp")) == "22/tcp"
    for bad in ["8888", "8888/udp", "0/tcp", "65536/tcp", "http/8888", "08/tcp", "/tcp", ""]:
        with pytest.raises(ValueError, match="port"):
            parse_port(bad)


@pytest.mark.parametrize("ports", [["8888"], ["8888/http", "8888/tcp"], ["99999/http"]])
def test_bad_or_repeated_ports_are_refused(ports: list[str]) -> None:
    with pytest.raises(ValidationError, match="port"):
        PodCreate(imageName="busybox", ports=ports)


@pytest.mark.parametrize("path", ["workspace", "./data", "/data/../etc", "/", "/usr", "/etc/"])
def test_a_mount_path_must_be_absolute_and_not_hide_the_system(path: str) -> None:
    with pytest.raises(ValidationError, match="volumeMountPath"):
        PodCreate(imageName="busybox", volumeMountPath=path)


def test_an_invalid_image_reference_is_refused() -> None:
    with pytest.raises(ValidationError, match="not a valid image reference"):
        PodCreate(imageName="Not An Image")


def test_an_update_says_which_changes_need_a_restart() -> None:
    current = PodSpec(name="p", imageName="busybox:1", ports=["8888/http"])
    renamed, restart = apply_pod_update(current, PodUpdate(name="q", locked=True))
    assert renamed.name == "q" and renamed.locked and restart == []
    moved, restart = apply_pod_update(current, PodUpdate(imageName="busybox:2", ports=["22/tcp"]))
    assert moved.imageName == "busybox:2" and restart == ["imageName", "ports"]
    same, restart = apply_pod_update(current, PodUpdate(imageName="busybox:1"))
    assert restart == [] and same == current


def test_a_pod_volume_grows_and_never_shrinks() -> None:
    current = PodSpec(name="p", imageName="busybox:1", volumeInGb=20)
    grown, restart = apply_pod_update(current, PodUpdate(volumeInGb=30))
    assert grown.volumeInGb == 30 and restart == ["volumeInGb"]
    with pytest.raises(ValueError, match="never shrinks"):
        apply_pod_update(current, PodUpdate(volumeInGb=10))
