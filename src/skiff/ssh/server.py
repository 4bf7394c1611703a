"""The SSH listeners: the server's SSH port (``SKIFF_SSH_PORT``, the user name names the pod)
and each running pod's own port (``SKIFF_SSH_POD_PORTS``, handed out by the pod runner and
reported in the pod's ``runtime.ports``), opened and closed as this replica's pods start and
stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

import asyncssh

from skiff.services.pod_shells import Caller, PodShells
from skiff.services.ssh_ports import SshPorts
from skiff.services.wakeups import Wake, Wakeups
from skiff.ssh import host_key
from skiff.ssh.channels import PodChannel
from skiff.ssh.doors import PodDoor

log = logging.getLogger(__name__)

#: How often the pods' own listeners are matched to the pods that run here.
SYNC_SECONDS = 1.0
#: A client that has not proved who it is by then is let go.
LOGIN_TIMEOUT_SECONDS = 30.0
#: Keepalives find a client that vanished without closing (a laptop's lid shut).
KEEPALIVE_SECONDS = 30.0


class PodServer(PodDoor):
    """A connection: its authentication (``PodDoor``) and its session channels."""

    def __init__(self, shells: PodShells, pod_id: str | None) -> None:
        super().__init__(shells, pod_id)
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
        return PodChannel(self._shells, caller, admitted.pod_id, self._local)


class SshServer:
    def __init__(
        self,
        shells: PodShells,
        ports: SshPorts,
        wakeups: Wakeups,
        *,
        host: str,
        port: int,
        data_dir: Path,
    ) -> None:
        self._shells = shells
        self._ports = ports
        self._wakeups = wakeups
        self._host = host
        self._port = port
        self._key = host_key.load_or_make(data_dir)
        self._gateway: asyncssh.SSHAcceptor | None = None
        #: Each pod's own listener, by port: (the pod, its listener).
        self._own: dict[int, tuple[str, asyncssh.SSHAcceptor]] = {}
        #: Ports that could not be listened on, and for which pod: said once, tried again.
        self._refused: dict[int, str] = {}

    async def _listen(self, port: int, pod_id: str | None) -> asyncssh.SSHAcceptor:
        return await asyncssh.create_server(
            lambda: PodServer(self._shells, pod_id),
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
        """Listen on the server's SSH port; its number (the one chosen, for port 0)."""
        self._gateway = await self._listen(self._port, None)
        port = int(self._gateway.sockets[0].getsockname()[1])
        self._shells.gateway_port = port
        log.info("SSH into pods on %s port %d (user name: the pod's id)", self._host, port)
        return port

    async def run(self) -> None:
        """Open and close the pods' own listeners as pods start and stop here: at once when
        the pod runner says a pod changed, and every ``SYNC_SECONDS`` anyway."""
        while not self._wakeups.closing:
            with self._wakeups.listen(Wake.PODS) as changed:
                try:
                    await self.sync()
                except Exception:
                    log.exception("the SSH listeners' sync failed")
                await self._wakeups.wait(changed, SYNC_SECONDS)

    async def sync(self) -> None:
        wanted = self._ports.held()
        for port, (pod_id, acceptor) in list(self._own.items()):
            if wanted.get(port) != pod_id:
                del self._own[port]
                acceptor.close()
        for port, pod_id in wanted.items():
            if port in self._own:
                continue
            try:
                self._own[port] = (pod_id, await self._listen(port, pod_id))
            except OSError as error:
                # Taken by another program: the pod is reached on the server's port only.
                if self._refused.get(port) != pod_id:
                    log.warning("pod %s: cannot listen on SSH port %d: %s", pod_id, port, error)
                self._refused[port] = pod_id
            else:
                self._refused.pop(port, None)

    async def close(self) -> None:
        acceptors = [a for _, a in self._own.values()]
        if self._gateway is not None:
            acceptors.append(self._gateway)
        self._own.clear()
        for acceptor in acceptors:
            acceptor.close()
        for acceptor in acceptors:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(acceptor.wait_closed(), 5)
