"""runpod-flash's images: a template that names one (``runpod/flash:py3.12-latest``,
``runpod/flash-cpu:…``) and no command of its own is run by skiff's own Flash worker
(``skiff.flash_worker``) instead of the hosted image, which skiff neither has nor needs; a
load-balanced one (``runpod/flash-lb…``) by the worker that serves its calls over HTTP."""

from __future__ import annotations

import enum

from skiff.domain.templates import Template

#: The repositories of the queue-based Flash images (GPU and CPU).
QUEUE_IMAGES = frozenset({"runpod/flash", "runpod/flash-cpu"})
#: The load-balanced ones.
LB_IMAGES = frozenset({"runpod/flash-lb", "runpod/flash-lb-cpu"})


#: Why an endpoint that runs the Flash worker is served to its owner only: that worker runs
#: the code each call sends, with the endpoint's secrets, volume and worker token.
FLASH_NOT_PUBLIC = (
    "an endpoint that runs the Flash worker runs the code its callers send, with its owner's "
    "secrets and volume: it is not published, and only its owner calls it"
)


class FlashImage(enum.Enum):
    QUEUE = "queue"
    LB = "lb"


def repository(image_name: str) -> str:
    """``runpod/flash`` of ``docker.io/runpod/flash:py3.12-latest`` (or ``…@sha256:…``)."""
    name = image_name.strip().split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        name = name[:colon]
    for prefix in ("docker.io/", "index.docker.io/", "registry-1.docker.io/"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    return name.lower()


def flash_worker_of(template: Template) -> FlashImage | None:
    """Which Flash worker runs ``template``'s workers, or None: a Flash image with no command
    of the user's own (a command of theirs wins, whatever the image)."""
    if template.dockerEntrypoint or template.dockerStartCmd:
        return None
    return flash_image(template.imageName)


def flash_image(image_name: str) -> FlashImage | None:
    """Which Flash image ``image_name`` is, or None for any other image."""
    repo = repository(image_name)
    if repo in QUEUE_IMAGES:
        return FlashImage.QUEUE
    if repo in LB_IMAGES:
        return FlashImage.LB
    return None
