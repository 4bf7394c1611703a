"""A template's ``imageName`` against Docker's reference grammar,
``[registry[:port]/]path[:tag][@digest]``: what ``docker pull`` accepts passes, anything else is
refused saying what is wrong, and a stored template loads whatever its image name."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from skiff.domain.image_references import image_reference_problem
from skiff.domain.templates import Template, TemplateCreate, TemplateUpdate

DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    "reference",
    [
        "ubuntu",
        "python:3.11-slim",
        "library/python:3.11",
        "runpod/worker-v1-vllm:stable-cuda12.1.0",
        "my_org/my__image/sub-path.x:v1.0_beta",
        "a--b/c",
        "ghcr.io/owner/image:latest",
        "registry.example.com:5000/team/worker:v1",
        "localhost/worker",
        "localhost:5000/worker:v1",
        "127.0.0.1:32977/skiff/worker:v1",
        "[::1]:5000/skiff/worker",
        "MyRegistry/worker",  # an uppercase first component is a registry host
        f"python@{DIGEST}",
        f"python:3.11@{DIGEST}",
        f"ghcr.io/o/i@sha512:{'b' * 128}",
        "worker:" + "t" * 128,
        "a" * 255,
    ],
)
def test_references_docker_accepts_pass(reference: str) -> None:
    assert image_reference_problem(reference) is None
    assert TemplateCreate(name="t", imageName=reference).imageName == reference


@pytest.mark.parametrize(
    ("reference", "says"),
    [
        ("Ubuntu", "must be lowercase"),
        ("ghcr.io/Owner/image", "must be lowercase"),
        ("python 3", "spaces"),
        ("python:", "invalid tag"),
        ("python:.hidden", "invalid tag"),
        ("python:-x", "invalid tag"),
        ("python:" + "t" * 129, "invalid tag"),
        ("python:a/b", "invalid registry"),  # a tag may not hold a '/': "python:a" is a host
        ("python@sha256:abc", "invalid digest"),
        (f"python@sha256:{'a' * 65}", "exactly 64"),
        ("python@", "invalid digest"),
        ("team//worker", "empty path component"),
        ("team/worker/", "empty path component"),
        ("/worker", "empty path component"),
        ("team/-worker", "invalid path component"),
        ("team/worker_", "invalid path component"),
        ("team/wor___ker", "invalid path component"),
        ("team/wörker", "invalid path component"),
        ("reg_istry.io/worker", "invalid registry"),
        ("-registry.io/worker", "invalid registry"),
        ("registry.io:port/worker", "invalid registry"),
        (":v1", "names no repository"),
        ("a" * 256, "too long"),
        ("f" * 64, "image id"),
    ],
)
def test_anything_else_is_refused_saying_why(reference: str, says: str) -> None:
    problem = image_reference_problem(reference)
    assert problem is not None and says in problem, problem


def test_a_template_with_a_bad_reference_is_refused_at_imagename() -> None:
    for model, data in [
        (TemplateCreate, {"name": "t", "imageName": "Bad/Image"}),
        (TemplateUpdate, {"imageName": "bad image"}),
    ]:
        with pytest.raises(ValidationError) as info:
            model.model_validate(data)
        (error,) = info.value.errors()
        assert error["loc"] == ("imageName",)
        assert "is not a valid image reference" in error["msg"]
    assert TemplateUpdate.model_validate({}).imageName is None


def test_a_stored_template_loads_even_if_its_image_name_predates_the_check() -> None:
    stored = Template.model_validate_json('{"id": "x", "name": "a", "imageName": "Not Valid"}')
    assert stored.imageName == "Not Valid"
