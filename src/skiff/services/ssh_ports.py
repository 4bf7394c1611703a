"""Which running pod serves SSH on which port of this host (``SKIFF_SSH_POD_PORTS``).

A pod's own port lets a client that names no pod (``runpod pod connect`` logs in as ``root``)
reach it; the pod runner takes one when it starts a pod and gives it back when the pod's
instance ends, and records it in the pod's placement, where ``runtime.ports`` reads it. The
SSH server listens on every port of the range from its start, before any pod runs, so that no
process (a local pod shares the host's network) can take one and pose as a pod's SSH.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


class SshPorts:
    def __init__(self, ports: range | None) -> None:
        """``ports``: the range to hand out; None: pods get none."""
        self._ports: Sequence[int] = ports if ports is not None else ()
        self._by_pod: dict[str, int] = {}

    @property
    def wanted(self) -> Sequence[int]:
        """Every port of the range, for the SSH server to listen on before any is handed out."""
        return self._ports

    def only(self, listening: Iterable[int]) -> None:
        """Hand out only these (the ones the SSH server listens on): a port another program
        holds would lead a pod's user to that program, not to their pod."""
        kept = set(listening)
        self._ports = [p for p in self._ports if p in kept]

    def take(self, pod_id: str, prefer: int | None = None) -> int | None:
        """The pod's port: the one it holds already, else ``prefer`` when free and in range
        (the port an adopted container had), else the lowest free; None when none is left."""
        if not self._ports:
            return None
        held = self._by_pod.get(pod_id)
        if held is not None:
            return held
        taken = set(self._by_pod.values())
        if prefer is not None and prefer in self._ports and prefer not in taken:
            self._by_pod[pod_id] = prefer
            return prefer
        port = next((p for p in self._ports if p not in taken), None)
        if port is not None:
            self._by_pod[pod_id] = port
        return port

    def release(self, pod_id: str) -> None:
        self._by_pod.pop(pod_id, None)

    def held(self) -> dict[int, str]:
        """Port -> the pod it leads into."""
        return {port: pod_id for pod_id, port in self._by_pod.items()}
