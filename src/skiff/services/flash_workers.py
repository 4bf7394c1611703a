"""What a Flash endpoint's worker runs (domain/flash.py): a template of a hosted Flash image
without a command of its own runs skiff's Flash worker, as a process of this server's Python
(``python -m skiff.flash_worker``, in the sandbox like any worker) or, where workers are
containers, as the image ``SKIFF_FLASH_IMAGE`` (``images/flash-worker``)."""

from __future__ import annotations

import sys

from skiff.domain.flash import LB_REFUSAL, FlashImage, flash_image
from skiff.domain.templates import Template

#: The Flash worker as a process: the server's own interpreter, which has the runpod SDK and
#: cloudpickle (the ``worker`` extra).
PROCESS_COMMAND = (sys.executable, "-m", "skiff.flash_worker")


class FlashRefused(ValueError):
    """A Flash image skiff does not run; the message says why and what to use instead."""


def as_run(template: Template, runs_images: bool, image: str) -> Template:
    """``template`` as its worker runs it: itself, unless it names a Flash image and no
    command. Raises ``FlashRefused`` for a load-balanced Flash image."""
    if template.dockerEntrypoint or template.dockerStartCmd:
        return template  # a command of the user's own wins, whatever the image
    kind = flash_image(template.imageName)
    if kind is None:
        return template
    if kind is FlashImage.LB:
        raise FlashRefused(LB_REFUSAL)
    if runs_images:
        return template.model_copy(update={"imageName": image})
    return template.model_copy(update={"dockerStartCmd": list(PROCESS_COMMAND)})
