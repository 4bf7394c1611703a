"""A template of a hosted Flash image without a command runs skiff's Flash worker: as a
process of the server's Python, or as the configured image where workers are containers; any
other template, and one with a command of its own, runs as it is."""

from __future__ import annotations

import sys
from pathlib import Path

from skiff.domain.templates import Template
from skiff.services.flash_workers import ENDPOINT_CACHE, LISTEN_HOST, as_run

IMAGE = "skiff/flash-worker:test"


def _template(image: str, command: list[str] | None = None) -> Template:
    return Template(id="t1", name="t", imageName=image, dockerStartCmd=command or [])


def test_a_flash_template_runs_the_flash_worker_as_a_process() -> None:
    run = as_run(_template("runpod/flash-cpu:py3.12-latest"), runs_images=False, image=IMAGE)
    assert run.dockerStartCmd == [sys.executable, "-m", "skiff.flash_worker"]
    assert run.imageName == "runpod/flash-cpu:py3.12-latest"


def test_a_flash_process_worker_is_told_its_endpoints_shared_cache() -> None:
    homes = Path("/data/workers/ep1")
    cache = homes / ".flash-cache"
    template = _template("runpod/flash-cpu:py3.12-latest")
    run = as_run(template, runs_images=False, image=IMAGE, homes=homes)
    assert run.env[ENDPOINT_CACHE] == str(cache)
    own = template.model_copy(update={"env": {ENDPOINT_CACHE: "/elsewhere"}})
    assert as_run(own, False, IMAGE, homes).env[ENDPOINT_CACHE] == "/elsewhere"
    # A container has no view of the host's directory.
    assert ENDPOINT_CACHE not in as_run(template, True, IMAGE, homes).env


def test_a_flash_template_runs_the_flash_image_as_a_container() -> None:
    run = as_run(_template("runpod/flash:py3.12-latest"), runs_images=True, image=IMAGE)
    assert run.imageName == IMAGE and run.dockerStartCmd == []


def test_other_templates_and_a_command_of_ones_own_run_as_they_are() -> None:
    plain = _template("python:3.11", ["python", "handler.py"])
    assert as_run(plain, runs_images=False, image=IMAGE) is plain
    own = _template("runpod/flash:py3.12-latest", ["python", "mine.py"])
    assert as_run(own, runs_images=True, image=IMAGE) is own


def test_a_load_balanced_flash_image_runs_the_worker_that_serves_http() -> None:
    template = _template("runpod/flash-lb-cpu:py3.12-latest")
    process = as_run(template, runs_images=False, image=IMAGE)
    assert process.dockerStartCmd == [sys.executable, "-m", "skiff.flash_worker.lb"]
    assert process.env[LISTEN_HOST] == "127.0.0.1"  # the host's network: loopback only
    container = as_run(template, runs_images=True, image=IMAGE)
    assert container.imageName == IMAGE
    assert container.dockerStartCmd == ["python", "-m", "skiff_flash_worker.lb"]
    assert LISTEN_HOST not in container.env  # its own network: every interface of its own
