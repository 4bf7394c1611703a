"""runpod-flash's images: a template that names one (``runpod/flash:py3.12-latest``,
``runpod/flash-cpu:…``) and no command of its own is run by skiff's own Flash worker
(``skiff.flash_worker``) instead of the hosted image, which skiff neither has nor needs. The
load-balanced variants (``runpod/flash-lb…``) serve routes, not functions, and are refused
with a clear reason."""

from __future__ import annotations

import enum

#: The repositories of the queue-based Flash images (GPU and CPU).
QUEUE_IMAGES = frozenset({"runpod/flash", "runpod/flash-cpu"})
#: The load-balanced ones.
LB_IMAGES = frozenset({"runpod/flash-lb", "runpod/flash-lb-cpu"})

LB_REFUSAL = (
    "load-balanced Flash endpoints (runpod/flash-lb images, routes declared with "
    "@Endpoint(...).get/.post) are not run by skiff: use a queue-based @Endpoint function or "
    "class, or a load-balancing endpoint with an image of your own"
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


def flash_image(image_name: str) -> FlashImage | None:
    """Which Flash image ``image_name`` is, or None for any other image."""
    repo = repository(image_name)
    if repo in QUEUE_IMAGES:
        return FlashImage.QUEUE
    if repo in LB_IMAGES:
        return FlashImage.LB
    return None
