"""Programs the pod tests run in their pods, as ``python -c`` so that a container of the test
image runs them as a process pod does."""

from __future__ import annotations

from pathlib import Path

#: ``tests/e2e/workers/pod_server.py``: a pod serving its state over HTTP on the port of its
#: first argument, on every address: how many times it started (counted in its volume, at
#: ``RUNPOD_VOLUME_MOUNT_PATH``), what is on its own disk (a file in its home, which a POST
#: writes), what it was told of itself (pod id, GPU count, ``CUDA_VISIBLE_DEVICES``, the
#: ``GREETING`` variable) and its pid.
SERVER_PATH = Path(__file__).parent / "e2e" / "workers" / "pod_server.py"
SERVER = SERVER_PATH.read_text()
