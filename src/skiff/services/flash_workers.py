"""What a Flash endpoint's worker runs (domain/flash.py): a template of a hosted Flash image
without a command of its own runs skiff's Flash worker, as a process of this server's Python
(``python -m skiff.flash_worker``, in the sandbox like any worker) or, where workers are
containers, as the image ``SKIFF_FLASH_IMAGE`` (``images/flash-worker``)."""

from __future__ import annotations

import sys
from pathlib import Path

from skiff.domain.flash import LB_REFUSAL, FlashImage, flash_image
from skiff.domain.templates import Template

#: The Flash worker as a process: the server's own interpreter, which has the runpod SDK and
#: cloudpickle (the ``worker`` extra).
PROCESS_COMMAND = (sys.executable, "-m", "skiff.flash_worker")


class FlashRefused(ValueError):
    """A Flash image skiff does not run; the message says why and what to use instead."""


#: Where a Flash worker run as a process keeps its dependencies unless the endpoint has a
#: volume (``flash_worker/dependencies.py``): a directory all the endpoint's workers share.
ENDPOINT_CACHE = "SKIFF_FLASH_ENDPOINT_CACHE"


def as_run(
    template: Template, runs_images: bool, image: str, endpoint_cache: Path | None = None
) -> Template:
    """``template`` as its worker runs it: itself, unless it names a Flash image and no
    command. ``endpoint_cache``: the directory the endpoint's process workers share (in
    their sandbox), for the Flash worker's dependencies. Raises ``FlashRefused`` for a
    load-balanced Flash image."""
    if template.dockerEntrypoint or template.dockerStartCmd:
        return template  # a command of the user's own wins, whatever the image
    kind = flash_image(template.imageName)
    if kind is None:
        return template
    if kind is FlashImage.LB:
        raise FlashRefused(LB_REFUSAL)
    if runs_images:
        return template.model_copy(update={"imageName": image})
    env = template.env
    if endpoint_cache is not None:
        env = {ENDPOINT_CACHE: str(endpoint_cache)} | env
    return template.model_copy(update={"dockerStartCmd": list(PROCESS_COMMAND), "env": env})
