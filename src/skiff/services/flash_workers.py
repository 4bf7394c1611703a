"""What a Flash endpoint's worker runs (domain/flash.py): a template of a hosted Flash image
without a command of its own runs skiff's Flash worker, as a process of this server's Python
(``python -m skiff.flash_worker``, in the sandbox like any worker) or, where workers are
containers, as the image ``SKIFF_FLASH_IMAGE`` (``images/flash-worker``). A load-balanced Flash
image (``runpod/flash-lb``) runs the worker that serves ``POST /execute`` instead
(``flash_worker/lb.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

from skiff.domain.flash import FlashImage, flash_worker_of
from skiff.domain.templates import Template

#: The Flash worker as a process: the server's own interpreter, which has the runpod SDK and
#: cloudpickle (the ``worker`` extra); and a load-balanced endpoint's, which serves HTTP.
PROCESS_COMMAND = (sys.executable, "-m", "skiff.flash_worker")
LB_PROCESS_COMMAND = (sys.executable, "-m", "skiff.flash_worker.lb")
#: The load-balanced worker in the Flash image (``images/flash-worker``), on its ``PATH``.
LB_IMAGE_COMMAND = ("python", "-m", "skiff_flash_worker.lb")
#: Where a Flash worker run as a process keeps its dependencies unless the endpoint has a
#: volume (``flash_worker/dependencies.py``): a directory all the endpoint's workers share.
ENDPOINT_CACHE = "SKIFF_FLASH_ENDPOINT_CACHE"
#: Where the load-balanced worker listens: a process shares this host's network, and skiff
#: proxies to it on the loopback.
LISTEN_HOST = "SKIFF_FLASH_HOST"


def as_run(
    template: Template, runs_images: bool, image: str, homes: Path | None = None
) -> Template:
    """``template`` as its worker runs it: itself, unless it names a Flash image and no
    command. ``homes``: the directory of the endpoint's workers' homes, which its process
    workers share (in their sandbox): the Flash worker keeps its dependencies there."""
    kind = flash_worker_of(template)
    if kind is None:
        return template
    balanced = kind is FlashImage.LB
    if runs_images:
        command = list(LB_IMAGE_COMMAND) if balanced else []
        return template.model_copy(update={"imageName": image, "dockerStartCmd": command})
    env = dict(template.env)
    if homes is not None:
        env = {ENDPOINT_CACHE: str(homes / ".flash-cache")} | env
    if balanced:
        env = {LISTEN_HOST: "127.0.0.1"} | env
    process = LB_PROCESS_COMMAND if balanced else PROCESS_COMMAND
    return template.model_copy(update={"dockerStartCmd": list(process), "env": env})
