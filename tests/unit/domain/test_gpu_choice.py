"""GPU declarations and which GPUs a worker gets."""

from __future__ import annotations

import pytest

from skiff.domain.gpus import Gpu, choose, parse_declared

RTX = "NVIDIA GeForce RTX 4090"
H100 = "NVIDIA H100 80GB HBM3"
FLEET = [Gpu(0, RTX), Gpu(1, RTX), Gpu(2, H100)]


def test_a_declared_fleet_numbers_gpus_in_order() -> None:
    assert parse_declared(f"{RTX}:2, {H100}:1") == FLEET


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("RTX", "not 'GPU type:count'"),
        ("RTX:two", "not a number"),
        ("RTX:0", "at least 1"),
        (":2", "not 'GPU type:count'"),
    ],
)
def test_a_bad_declaration_says_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_declared(spec)


def test_the_first_listed_type_with_room_wins() -> None:
    assert choose([H100, RTX], 1, FLEET) == [Gpu(2, H100)]


def test_falls_back_to_the_next_type_when_the_first_is_full() -> None:
    assert choose([H100, RTX], 1, FLEET[:2]) == [Gpu(0, RTX)]


def test_a_worker_gets_gpu_count_gpus_of_one_type_or_none() -> None:
    assert choose([RTX], 2, FLEET) == [Gpu(0, RTX), Gpu(1, RTX)]
    assert choose([H100], 2, FLEET) is None
    assert choose([RTX, H100], 2, [Gpu(1, RTX), Gpu(2, H100)]) is None


def test_an_empty_type_list_takes_any_type_in_inventory_order() -> None:
    assert choose([], 1, FLEET[1:]) == [Gpu(1, RTX)]


def test_a_type_the_host_does_not_have_is_never_chosen() -> None:
    assert choose(["NVIDIA B200"], 1, FLEET) is None


def test_a_workers_gpus_are_all_on_one_machine_of_a_cluster() -> None:
    # Two of a type free, but one on each node: a 2-GPU worker fits on neither.
    spread = [Gpu(0, RTX, node="a"), Gpu(1, RTX, node="b"), Gpu(2, RTX, node="b")]
    assert choose([RTX], 2, spread) == [Gpu(1, RTX, node="b"), Gpu(2, RTX, node="b")]
    assert choose([RTX], 2, spread[:2]) is None
    assert choose([RTX], 1, spread) == [Gpu(0, RTX, node="a")]
