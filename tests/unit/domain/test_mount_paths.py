"""The one rule for ``volumeMountPath`` (``domain/mount_paths.py``): a top-level directory with a
plain name, not a system one; the refusal says what is accepted. Templates and pods (create and
update) apply it through their input models; a stored template keeps loading with what it held."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pydantic import ValidationError

from skiff.domain.mount_paths import (
    ALLOWED,
    SYSTEM_DIRECTORIES,
    check_mount_path,
    check_optional_mount_path,
    mount_path_problem,
)
from skiff.domain.pods import PodCreate, PodUpdate
from skiff.domain.templates import Template, TemplateCreate, TemplateUpdate


@pytest.mark.parametrize(
    "path", ["/workspace", "/runpod-volume", "/data", "/models", "/mnt", "/srv", "/_x", "/v1.2"]
)
def test_a_top_level_directory_with_a_plain_name_is_accepted(path: str) -> None:
    assert mount_path_problem(path) is None
    assert check_mount_path(path) == path


def test_one_trailing_slash_is_dropped() -> None:
    assert check_mount_path("/workspace/") == "/workspace"


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("workspace", "not an absolute path"),
        ("", "not an absolute path"),
        ("/", "root directory"),
        ("//", "root directory"),
        ("//data", "not a top-level directory"),
        ("/data//", "not a top-level directory"),
        ("/workspace/models", "not a top-level directory"),
        ("/./data", "not a top-level directory"),
        ("/data/..", "not a top-level directory"),
        ("/../../", "not a top-level directory"),
        ("/.", "starts with '.'"),
        ("/..", "starts with '.'"),
        ("/.hidden", "starts with '.'"),
        ("/-rf", "starts with '.' or '-'"),
        ("/a b", "not accepted"),
        ("/a:b", "not accepted"),
        ("/a,b", "not accepted"),
        ("/tab\there", "not accepted"),
        ("/new\nline", "not accepted"),
        ("/nul\x00", "not accepted"),
        ("/caf\u00e9", "not accepted"),
        ("/" + "x" * 256, "longer than 255"),
    ],
)
def test_anything_but_one_plain_name_under_the_root_is_refused(path: str, says: str) -> None:
    problem = mount_path_problem(path)
    assert problem is not None and says in problem


@pytest.mark.parametrize("name", sorted(SYSTEM_DIRECTORIES))
def test_a_system_directory_is_refused(name: str) -> None:
    for path in (f"/{name}", f"/{name}/"):
        problem = mount_path_problem(path)
        assert problem is not None and "system directory" in problem


def test_the_system_directories_include_those_that_would_hide_the_host() -> None:
    expected = {"etc", "usr", "bin", "sbin", "lib", "lib64", "proc", "sys", "dev", "boot"}
    assert expected | {"run", "var", "tmp", "root", "home", "opt"} <= SYSTEM_DIRECTORIES


def test_a_refusal_names_the_value_and_says_what_is_accepted() -> None:
    with pytest.raises(ValueError) as refused:
        check_mount_path("/etc")
    message = str(refused.value)
    assert message.startswith("'/etc' is a system directory")
    assert message.endswith(ALLOWED) and "/workspace" in message and "/etc" in ALLOWED
    assert check_optional_mount_path(None) is None


def test_a_name_of_255_characters_is_accepted() -> None:
    assert mount_path_problem("/" + "x" * 255) is None


@pytest.mark.parametrize(
    "make",
    [
        lambda p: TemplateCreate(name="t", imageName="busybox", volumeMountPath=p),
        lambda p: TemplateUpdate(volumeMountPath=p),
        lambda p: PodCreate(imageName="busybox", volumeMountPath=p),
        lambda p: PodUpdate(volumeMountPath=p),
    ],
    ids=["template create", "template update", "pod create", "pod update"],
)
def test_templates_and_pods_apply_the_rule_and_keep_the_plain_form(
    make: Callable[[str], Any],
) -> None:
    assert make("/data/").volumeMountPath == "/data"
    for bad in ("/", "/etc", "../../", "/workspace/models"):
        with pytest.raises(ValidationError, match="volumeMountPath"):
            make(bad)


def test_a_template_or_pod_that_gives_no_path_gets_the_default_or_keeps_its_own() -> None:
    assert TemplateCreate(name="t", imageName="busybox").volumeMountPath == "/workspace"
    assert TemplateUpdate().volumeMountPath is None
    assert PodCreate(imageName="busybox").volumeMountPath is None
    assert PodUpdate(volumeMountPath=None).volumeMountPath is None  # null: unchanged


def test_a_template_update_may_not_null_its_mount_path() -> None:
    # A template stores what its update gives, and one without a mount path would not load.
    with pytest.raises(ValidationError, match="cannot be null"):
        TemplateUpdate(volumeMountPath=None)


def test_a_template_stored_before_the_rule_still_loads() -> None:
    stored = Template.model_validate(
        {"id": "t1", "name": "old", "imageName": "busybox", "volumeMountPath": "/etc"}
    )
    assert stored.volumeMountPath == "/etc"
