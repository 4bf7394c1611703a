"""Programs the pod tests run in their pods, as ``python -c`` so that a container of the test
image runs them as a process pod does."""

from __future__ import annotations

import random
import socket
from pathlib import Path

#: ``tests/e2e/workers/pod_server.py``: a pod serving its state over HTTP on the port of its
#: first argument, on every address: how many times it started (counted in its volume, at
#: ``RUNPOD_VOLUME_MOUNT_PATH``), what is on its own disk (a file in its home, which a POST
#: writes), what it was told of itself (pod id, GPU count, ``CUDA_VISIBLE_DEVICES``, the
#: ``GREETING`` variable) and its pid.
SERVER_PATH = Path(__file__).parent / "e2e" / "workers" / "pod_server.py"
SERVER = SERVER_PATH.read_text()


def pod_port() -> int:
    """A free port for a pod to declare: below the ports kept for load-balancing workers and the
    kernel's ephemeral range, which no pod run as a process may declare (``local_pods.py``)."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(10_000, 20_000)
        with socket.socket() as sock:
            try:
                sock.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port between 10000 and 20000")
