"""Which images are runpod-flash's, whatever registry prefix, tag or digest they carry."""

from __future__ import annotations

import pytest

from skiff.domain.flash import FlashImage, flash_image


@pytest.mark.parametrize(
    ("image", "kind"),
    [
        ("runpod/flash:py3.12-latest", FlashImage.QUEUE),
        ("runpod/flash-cpu:py3.11-1.2", FlashImage.QUEUE),
        ("docker.io/runpod/flash-cpu:py3.12-latest", FlashImage.QUEUE),
        ("runpod/flash@sha256:" + "0" * 64, FlashImage.QUEUE),
        ("runpod/flash-lb:py3.12-latest", FlashImage.LB),
        ("runpod/flash-lb-cpu:latest", FlashImage.LB),
        ("runpod/flashy:latest", None),
        ("registry.example.com:5000/runpod/flash:latest", None),
        ("python:3.11", None),
    ],
)
def test_flash_images_are_known_by_repository(image: str, kind: FlashImage | None) -> None:
    assert flash_image(image) is kind
