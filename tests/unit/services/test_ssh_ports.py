"""Each running pod's own SSH port (services/ssh_ports.py): one per pod, the lowest free, the
one an adopted container had where it is free, none when the range is spent or SSH is off."""

from __future__ import annotations

from skiff.services.ssh_ports import SshPorts


def test_a_pod_keeps_its_port_and_the_next_pod_gets_the_lowest_free() -> None:
    ports = SshPorts(range(2200, 2203))
    assert ports.take("a") == 2200
    assert ports.take("a") == 2200
    assert ports.take("b") == 2201
    ports.release("a")
    assert ports.take("c") == 2200
    assert ports.held() == {2200: "c", 2201: "b"}


def test_an_adopted_pod_gets_its_old_port_back_when_free_and_in_range() -> None:
    ports = SshPorts(range(2200, 2203))
    assert ports.take("a", prefer=2202) == 2202
    assert ports.take("b", prefer=2202) == 2200  # taken: the lowest free instead
    assert ports.take("c", prefer=9999) == 2201  # out of range


def test_none_is_handed_out_when_the_range_is_spent_or_ssh_is_off() -> None:
    ports = SshPorts(range(2200, 2201))
    assert ports.take("a") == 2200
    assert ports.take("b") is None
    off = SshPorts(None)
    assert off.take("a") is None and off.held() == {}
    off.release("a")


def test_only_the_ports_the_ssh_server_listens_on_are_handed_out() -> None:
    ports = SshPorts(range(2200, 2204))
    assert list(ports.wanted) == [2200, 2201, 2202, 2203]
    ports.only([2201, 2203])  # 2200 and 2202 are another program's
    assert [ports.take("a"), ports.take("b"), ports.take("c")] == [2201, 2203, None]
    assert ports.take("d", prefer=2200) is None
