"""CPU instance ids (``domain/instance_ids``): flavor-vCPUs-GB read into their parts, with
skiff's bounds on the numbers."""

from __future__ import annotations

import pytest

from skiff.domain import instance_ids
from skiff.domain.instance_ids import InstanceId


def test_an_instance_id_reads_as_flavor_vcpus_and_gigabytes() -> None:
    assert instance_ids.parse("cpu5g-8-32") == InstanceId(flavor="cpu5g", vcpus=8, memory_gb=32)


def test_an_instance_id_writes_back_as_it_was_read() -> None:
    assert str(instance_ids.parse("cpu3c-2-4")) == "cpu3c-2-4"


@pytest.mark.parametrize(
    "text",
    ["", "cpu3c", "cpu3c-2", "cpu3c-2-4-8", "cpu4c-2-4", "cpu3c-0-4", "cpu3c-2-04", "gpu3c-2-4"],
)
def test_text_not_of_the_shape_is_no_instance_id(text: str) -> None:
    assert instance_ids.parse(text) is None
    assert instance_ids.shape(text) is None


@pytest.mark.parametrize(
    ("text", "says"),
    [("cpu3c-513-8", "513 vCPUs; at most 512"), ("cpu3c-8-4097", "4097 GB of memory")],
)
def test_numbers_past_the_bounds_are_no_instance_id_and_say_which(text: str, says: str) -> None:
    assert instance_ids.parse(text) is None
    read = instance_ids.shape(text)
    assert read is not None
    bound = instance_ids.out_of_bounds(read)
    assert bound is not None and says in bound


def test_the_bounds_themselves_are_instance_ids() -> None:
    assert instance_ids.parse("cpu3c-512-4096") == InstanceId("cpu3c", 512, 4096)
