"""The cap on a load-balancing endpoint's requests in flight (``services/lb_proxy.InFlight``)
and its setting, ``SKIFF_LB_MAX_IN_FLIGHT``."""

from __future__ import annotations

import pytest

from skiff.config import Settings
from skiff.services.lb_proxy import EndpointBusy, InFlight


def test_a_request_over_the_cap_is_refused_with_503_and_retry_after() -> None:
    in_flight = InFlight(2)
    in_flight.enter("ep1")
    in_flight.enter("ep1")

    with pytest.raises(EndpointBusy) as refused:
        in_flight.enter("ep1")

    assert refused.value.status_code == 503
    assert refused.value.retry_after == 5
    assert "endpoint ep1 has too many requests in flight (2" in refused.value.message
    assert in_flight.of("ep1") == 2  # the refused one is not counted


def test_a_request_that_leaves_frees_its_slot() -> None:
    in_flight = InFlight(1)
    in_flight.enter("ep1")
    in_flight.leave("ep1")

    in_flight.enter("ep1")

    assert in_flight.of("ep1") == 1


def test_each_endpoint_has_its_own_cap() -> None:
    in_flight = InFlight(1)
    in_flight.enter("ep1")

    in_flight.enter("ep2")

    assert (in_flight.of("ep1"), in_flight.of("ep2")) == (1, 1)


def test_a_cap_of_zero_refuses_nothing() -> None:
    in_flight = InFlight(0)
    for _ in range(10_000):
        in_flight.enter("ep1")

    assert in_flight.of("ep1") == 10_000


def test_an_endpoint_with_nothing_in_flight_keeps_no_entry() -> None:
    in_flight = InFlight(4)
    in_flight.enter("ep1")
    in_flight.leave("ep1")

    assert in_flight._counts == {}


def test_the_setting_defaults_to_256(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SKIFF_LB_MAX_IN_FLIGHT", raising=False)
    assert Settings().lb_max_in_flight == 256


def test_the_setting_is_read_from_the_environment_and_0_is_no_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SKIFF_LB_MAX_IN_FLIGHT", "0")
    assert Settings().lb_max_in_flight == 0
    monkeypatch.setenv("SKIFF_LB_MAX_IN_FLIGHT", "1000")
    assert Settings().lb_max_in_flight == 1000


@pytest.mark.parametrize("value", ["-1", "many"])
def test_a_bad_setting_is_refused(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("SKIFF_LB_MAX_IN_FLIGHT", value)
    with pytest.raises(ValueError, match="lb_max_in_flight"):
        Settings()
