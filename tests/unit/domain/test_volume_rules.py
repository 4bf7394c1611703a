"""Network volumes' input and size rules (domain/volumes.py): the v1 reference's bounds with
strict types, a size that never shrinks, and a size that must fit in the disk's free space
(counting what the volume holds already as its own)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from skiff.domain.volumes import (
    BYTES_PER_GB,
    MAX_SIZE_GB,
    NetworkVolumeCreate,
    NetworkVolumeUpdate,
    room_refusal,
    shrink_refusal,
)


def refused_at(model: type[BaseModel], data: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as info:
        model.model_validate(data)
    return ".".join(str(p) for p in info.value.errors()[0]["loc"])


def test_a_create_needs_a_name_and_a_size_and_nothing_else() -> None:
    made = NetworkVolumeCreate.model_validate({"name": "models", "size": 0})
    assert (made.name, made.size, made.dataCenterId) == ("models", 0, None)
    assert refused_at(NetworkVolumeCreate, {"size": 1}) == "name"
    assert refused_at(NetworkVolumeCreate, {"name": "models"}) == "size"


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"name": "", "size": 1}, "name"),
        ({"name": "n" * 192, "size": 1}, "name"),
        ({"name": "a\x00b", "size": 1}, "name"),
        ({"name": 7, "size": 1}, "name"),
        ({"name": "v", "size": -1}, "size"),
        ({"name": "v", "size": MAX_SIZE_GB + 1}, "size"),
        ({"name": "v", "size": "10"}, "size"),
        ({"name": "v", "size": True}, "size"),
        ({"name": "v", "size": 2.5}, "size"),
        ({"name": "v", "size": 1, "dataCenterId": ""}, "dataCenterId"),
        ({"name": "v", "size": 1, "mountPath": "/x"}, "mountPath"),
    ],
)
def test_a_bad_create_is_refused_at_its_field(data: dict[str, Any], field: str) -> None:
    assert refused_at(NetworkVolumeCreate, data) == field


def test_the_largest_size_and_an_integral_float_are_taken() -> None:
    assert NetworkVolumeCreate.model_validate({"name": "v", "size": 4000.0}).size == MAX_SIZE_GB


def test_an_update_may_leave_out_either_field_and_is_checked_like_a_create() -> None:
    assert NetworkVolumeUpdate.model_validate({}).model_dump() == {"name": None, "size": None}
    assert NetworkVolumeUpdate.model_validate({"size": 5}).size == 5
    assert refused_at(NetworkVolumeUpdate, {"size": -1}) == "size"
    assert refused_at(NetworkVolumeUpdate, {"name": ""}) == "name"
    assert refused_at(NetworkVolumeUpdate, {"dataCenterId": "x"}) == "dataCenterId"


def test_a_volume_grows_or_keeps_its_size_but_never_shrinks() -> None:
    assert shrink_refusal(10, 10) is None
    assert shrink_refusal(10, 11) is None
    refusal = shrink_refusal(10, 9)
    assert refusal is not None and "never shrinks" in refusal and "10 GB" in refusal


def test_a_size_must_fit_in_the_free_space_plus_what_the_volume_holds() -> None:
    assert room_refusal(2, free_bytes=2 * BYTES_PER_GB) is None
    refusal = room_refusal(3, free_bytes=2 * BYTES_PER_GB)
    assert refusal is not None and "3 GB does not fit" in refusal and "2.0 GB" in refusal
    # A volume holding 1 GB already needs only 2 more to be 3.
    assert room_refusal(3, free_bytes=2 * BYTES_PER_GB, used_bytes=BYTES_PER_GB) is None
    assert room_refusal(0, free_bytes=0) is None
