"""The SSH listeners: the server's SSH port (``SKIFF_SSH_PORT``, the user name names the pod)
and every pod port (``SKIFF_SSH_POD_PORTS``), all opened at start; a connection to a pod port
leads into the pod the port is handed to now (``SshPorts``, by the pod runner, reported in the
pod's ``runtime.ports``), or nowhere."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

import asyncssh
from attrs import define, field

from skiff.services.pod_shells import Caller, PodShells
from skiff.services.ssh_ports import SshPorts
from skiff.ssh import host_key
from skiff.ssh.channels import PodChannel
from skiff.ssh.doors import Logins, PodDoor

log = logging.getLogger(__name__)

#: A client that has not proved who it is by then is let go.
LOGIN_TIMEOUT_SECONDS = 30.0
#: Keepalives find a client that vanished without closing (a laptop's lid shut).
KEEPALIVE_SECONDS = 30.0


class PodServer(PodDoor):
    """A connection: its authentication (``PodDoor``) and its session channels."""

    def __init__(
        self, shells: PodShells, ports: SshPorts | None, port: int, logins: Logins
    ) -> None:
        super().__init__(shells, ports, port, logins)
        self._local = ""

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        super().connection_made(conn)
        sock = conn.get_extra_info("sockname")
        if sock:
            self._local = f"{sock[0]}:{sock[1]}"

    def session_requested(self) -> PodChannel | bool:
        admitted = self.admitted
        if admitted is None:
            return False
        caller = Caller(admitted.user, "ssh", self.peer, f"key {admitted.fingerprint}")
        return PodChannel(self._shells, caller, admitted, self.peer_address, self._local)


@define(eq=False, repr=False, slots=False)
class SshServer:
    _shells: PodShells
    _ports: SshPorts
    _host: str = field(kw_only=True)
    _port: int = field(kw_only=True)
    #: Where the host key is kept (made on the first start).
    _data_dir: Path = field(kw_only=True)
    _acceptors: list[asyncssh.SSHAcceptor] = field(init=False, factory=list)
    _logins: Logins = field(init=False, factory=Logins)

    def __attrs_post_init__(self) -> None:
        self._key = host_key.load_or_make(self._data_dir)

    async def _listen(self, port: int, pod_port: bool) -> asyncssh.SSHAcceptor:
        ports = self._ports if pod_port else None
        return await asyncssh.create_server(
            lambda: PodServer(self._shells, ports, port, self._logins),
            self._host,
            port,
            server_host_keys=[self._key],
            encoding=None,
            login_timeout=LOGIN_TIMEOUT_SECONDS,
            keepalive_interval=KEEPALIVE_SECONDS,
            agent_forwarding=False,
            x11_forwarding=False,
            allow_scp=False,
        )

    async def start(self) -> int:
        """Listen on the server's SSH port and on every pod port (before any pod starts, so
        each is skiff's own when it is handed out); the SSH port's number (the one chosen,
        for port 0)."""
        gateway = await self._listen(self._port, pod_port=False)
        self._acceptors.append(gateway)
        port = int(gateway.sockets[0].getsockname()[1])
        self._shells.gateway_port = port
        listening = []
        for pod_port in self._ports.wanted:
            try:
                self._acceptors.append(await self._listen(pod_port, pod_port=True))
            except OSError as error:
                log.warning("SSH: port %d is not handed to pods: %s", pod_port, error)
                continue
            listening.append(pod_port)
        self._ports.only(listening)
        log.info(
            "SSH into pods on %s port %d (user name: the pod's id), and %d pod ports",
            self._host,
            port,
            len(listening),
        )
        return port

    async def close(self) -> None:
        acceptors, self._acceptors = self._acceptors, []
        for acceptor in acceptors:
            acceptor.close()
        for acceptor in acceptors:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await acceptor.wait_closed()
