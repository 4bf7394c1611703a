"""Which copy of an image on the shared Docker daemon may run for a template without
registry credentials (``providers/docker.py`` ``ensure_image``): one that bears the name asked
for, from a repository no pull with credentials came from. The daemon is faked here (what it
answers is what Docker answers); the real daemon and registry: tests/e2e/test_containers.py."""

from __future__ import annotations

from typing import Any

import pytest
from docker.errors import ImageNotFound

from skiff.providers.base import RegistryCredentials
from skiff.providers.docker import (
    CREDENTIALED_MARK,
    WorkerStartError,
    bears_name,
    ensure_image,
    normal_reference,
    repository_of,
)

PRIVATE = "registry.example:5000/team/model:v1"


class Image:
    def __init__(self, image_id: str, tags: list[str], digests: list[str] | None = None) -> None:
        self.id = image_id
        self.tags = tags
        self.attrs = {"RepoDigests": digests or []}


class Daemon:
    """Images by tag (and found by a prefix of their id, as Docker does); pulls answered by
    ``pullable`` (reference -> whether a pull without credentials succeeds)."""

    def __init__(self, images: list[Image], pullable: dict[str, bool]) -> None:
        self._images = images
        self.pullable = pullable
        self.pulled: list[tuple[str, bool]] = []
        self.images = self
        self.api = self

    def get(self, name: str) -> Image:
        for image in self._images:
            if normal_reference(name) in {normal_reference(t) for t in image.tags}:
                return image
            if image.id.startswith("sha256:" + name):
                return image
        raise ImageNotFound(name)

    def pull(self, repo: str, tag: str, auth_config: Any, **_: Any) -> list[dict[str, Any]]:
        reference = f"{repo}:{tag}"
        self.pulled.append((reference, auth_config is not None))
        if auth_config is None and not self.pullable.get(reference, False):
            return [{"error": "no basic auth credentials"}]
        if not any(reference in i.tags for i in self._images):
            self._images.append(Image("sha256:" + "9" * 64, [reference]))
        return [{"status": "Downloaded"}]

    def tag(self, image: str, repository: str, tag: str) -> None:
        self.get(image).tags.append(f"{repository}:{tag}")


class Sink:
    def feed(self, data: bytes) -> float:
        return 0.0


def ensure(daemon: Daemon, image: str, credentials: RegistryCredentials | None = None) -> None:
    ensure_image(daemon, image, credentials, Sink(), lambda: False)  # type: ignore[arg-type]


def test_a_private_image_pulled_for_one_user_is_pulled_again_without_credentials() -> None:
    daemon = Daemon([], pullable={})
    ensure(daemon, PRIVATE, RegistryCredentials("alice", "secret"))
    assert daemon.pulled == [(PRIVATE, True)]
    # The repository is marked, whichever of its references is named next.
    assert any(t.startswith(CREDENTIALED_MARK + "/") for t in daemon.get(PRIVATE).tags)
    for reference in (PRIVATE, "registry.example:5000/team/model:v2"):
        with pytest.raises(WorkerStartError, match="refused the credentials"):
            ensure(daemon, reference)
    assert daemon.pulled[1:] == [(PRIVATE, False), ("registry.example:5000/team/model:v2", False)]


def test_a_copy_found_by_a_prefix_of_its_id_is_not_run() -> None:
    local = Image("sha256:6" + "0" * 63, ["operator/base:1"])
    daemon = Daemon([local], pullable={})
    with pytest.raises(WorkerStartError):
        ensure(daemon, "6")
    assert daemon.pulled == [("6:latest", False)]


def test_an_image_the_operator_put_on_the_daemon_runs_without_a_pull() -> None:
    daemon = Daemon([Image("sha256:" + "1" * 64, ["operator/base:1"])], pullable={})
    ensure(daemon, "operator/base:1")
    ensure(daemon, "docker.io/operator/base:1")
    assert daemon.pulled == []


def test_a_public_image_pulled_without_credentials_is_served_from_its_copy_after() -> None:
    daemon = Daemon([], pullable={"ubuntu:22.04": True})
    ensure(daemon, "ubuntu:22.04")
    ensure(daemon, "docker.io/library/ubuntu:22.04")
    assert daemon.pulled == [("ubuntu:22.04", False)]


@pytest.mark.parametrize(
    ("reference", "normal", "repository"),
    [
        ("ubuntu", "ubuntu:latest", "ubuntu"),
        ("docker.io/library/ubuntu:22.04", "ubuntu:22.04", "ubuntu"),
        ("host:5000/a/b", "host:5000/a/b:latest", "host:5000/a/b"),
        ("host:5000/a/b@sha256:ab", "host:5000/a/b@sha256:ab", "host:5000/a/b"),
    ],
)
def test_references_are_compared_as_docker_lists_them(
    reference: str, normal: str, repository: str
) -> None:
    assert normal_reference(reference) == normal
    assert repository_of(reference) == repository


def test_a_copy_bears_the_digest_it_was_pulled_by() -> None:
    local = Image("sha256:" + "2" * 64, ["host:5000/a/b:v1"], ["host:5000/a/b@sha256:ab"])
    assert bears_name(local, "host:5000/a/b@sha256:ab")
    assert bears_name(local, "host:5000/a/b:v1")
    assert not bears_name(local, "host:5000/a/b:v2")
    assert not bears_name(local, "2222")
