"""The ways into a pod, as its page's Connect menu lists them: the console's terminal, SSH (the
command to copy, or how an administrator turns it on), and each port it publishes with what
serves it (an ``http`` port's URL, a ``tcp`` port's host and port)."""

from __future__ import annotations

from dataclasses import dataclass

from skiff.domain.pods import Pod, runtime_status
from skiff.services.hub import Services


@dataclass(frozen=True, slots=True)
class PortWay:
    #: As the pod declares it: ``8888/http``.
    port: str
    #: Where it is reached: a URL for ``http``, ``host:port`` for ``tcp``.
    address: str
    #: The address is a link (an ``http`` port).
    link: bool


@dataclass(frozen=True, slots=True)
class Connect:
    running: bool
    #: ``ssh root@host -p port``: the pod's own SSH port; None without one.
    ssh: str | None
    #: ``ssh POD_ID@host -p port``: through the server's SSH port; None when it has none.
    gateway: str | None
    #: The server serves no SSH at all (``SKIFF_SSH_PORT`` unset).
    ssh_off: bool
    ports: list[PortWay]


def _host_part(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def connect_of(services: Services, pod: Pod) -> Connect:
    runner = services.pod_runner
    running = runtime_status(pod) == "running"
    own = runner.ssh_address(pod)
    ssh = f"ssh root@{own[0]} -p {own[1]}" if own is not None else None
    gateway_port = services.pod_shells.gateway_port
    gateway = None
    if gateway_port is not None and running:
        gateway = f"ssh {pod.id}@{runner.public_host} -p {gateway_port}"
    ports = []
    host = _host_part(runner.host_of(pod))
    for port, host_port in pod.placement.portMappings.items():
        url = runner.port_url(pod, port, host_port)
        if url is not None:
            ports.append(PortWay(port, url, True))
        else:  # a tcp port: no URL to make of it
            ports.append(PortWay(port, f"{host}:{host_port}", False))
    return Connect(running, ssh, gateway, gateway_port is None and own is None, ports)
