"""What runs inside a fork server (a "zygote"): the worker's own Python, with the runpod SDK
and everything it imports already loaded, forking one ready worker per request.

This file is not imported by skiff: ``fork_server.py`` runs its source with ``python -c`` in
the worker's interpreter, so it uses the standard library only and touches nothing of skiff's.

Protocol over the inherited socket (``SKIFF_ZYGOTE_FD``, ``SOCK_SEQPACKET``), one JSON object
per packet:

- zygote -> server, once: ``{"ready": true}`` after the imports, or ``{"error": "..."}`` and
  exit when they fail (the server then starts that interpreter's workers the plain way);
- server -> zygote: ``{"fork": T, "argv": [...], "env": {...}, "cwd": "..."}`` with the
  worker's log pipe and the read end of its gate as attached file descriptors
  (``SCM_RIGHTS``);
- the forked worker -> server, first thing and once: ``{"forked": T, "pid": N}``, ``N`` its pid
  as it sees it. The server reads the worker's pid in its own namespace from the message's
  credentials (``SO_PASSCRED``): a zygote in a sandbox (its own PID namespace) numbers its
  children otherwise. The worker then closes the socket and waits for a byte at its gate
  before any of its own code runs (none: it exits);
- zygote -> server: ``{"exited": N, "code": C}`` when a worker ends, ``N`` as the worker sent
  it (``C`` as ``asyncio``'s returncode: negative for a signal).

What a forked worker inherits is the interpreter with ``runpod``'s dependencies imported, and
nothing else: the SDK's own modules are imported again in the worker, under the worker's own
environment (they read it at import time), except ``rp_debugger``, whose import only measures
the host (its processor probe is most of ``import runpod``'s time). Every other module, the
worker's handler included, is imported by the worker as a freshly started one would.
"""

import contextlib
import json
import os
import select
import signal
import socket
import sys
import threading
from typing import Any

# Host facts only, read at import and the same for every worker (see the docstring).
_KEPT = ("runpod.serverless.utils.rp_debugger",)
_PR_SET_PDEATHSIG = 1
_PACKET = 1 << 20


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.send(json.dumps(message).encode())


def _receive(sock: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    data, fds, _flags, _addr = socket.recv_fds(sock, _PACKET, 4)
    if not data:
        return None
    message: dict[str, Any] = json.loads(data)
    return message, list(fds)


def _preload() -> None:
    """The SDK imported on idle CPU only. A zygote is started ahead of need, often while the
    server and the endpoint's first workers are busy on the same cores: its import (a second
    or two of CPU) must not slow them. The thread doing it is ``SCHED_IDLE`` (a thread's own
    policy on Linux), and so is the processor probe it runs in a child; the zygote's main
    thread, which forks the workers, keeps the normal policy, which an unprivileged process
    could not get back once it had left it."""
    failed: list[BaseException] = []

    def load() -> None:
        # Not Linux, or not allowed: imported at the normal priority.
        with contextlib.suppress(AttributeError, OSError):
            os.sched_setscheduler(threading.get_native_id(), os.SCHED_IDLE, os.sched_param(0))
        try:
            import runpod  # type: ignore[import-untyped]  # noqa: F401 - its dependencies stay
        except BaseException as exc:
            failed.append(exc)

    loading = threading.Thread(target=load, name="skiff-zygote-preload")
    loading.start()
    loading.join()
    if failed:
        raise failed[0]
    for name in [m for m in sys.modules if m == "runpod" or m.startswith("runpod.")]:
        if name not in _KEPT:
            del sys.modules[name]


def _die_with_parent() -> None:
    import ctypes

    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _become(request: dict[str, Any], log_fd: int, base_path: list[str]) -> None:
    """In the forked child: turn into the worker ``python script args...`` would have started,
    then run its script. Never returns: the script's end is the process's end, with Python's
    own shutdown (atexit, threads joined, buffers flushed)."""
    os.setsid()
    _die_with_parent()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(null)
    os.close(log_fd)
    env = request["env"]
    os.environ.clear()
    os.environ.update(env)
    os.chdir(request["cwd"])
    argv = request["argv"]
    script = os.path.abspath(argv[0])
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    sys.stdout = open(1, "w", buffering=1 if unbuffered else -1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stdin = open(0, closefd=False)  # noqa: SIM115
    # As a fresh ``python script`` has it: the script's folder first, then PYTHONPATH, then
    # the interpreter's own (the zygote is started per PYTHONPATH, so that part is the same).
    sys.path[:] = [os.path.dirname(script), *base_path]
    sys.argv = list(argv)
    import runpy

    runpy.run_path(script, run_name="__main__")
    sys.exit(0)


def main() -> None:
    sock = socket.socket(fileno=int(os.environ.pop("SKIFF_ZYGOTE_FD")))
    # The zygote's own sys.path[0] is '' (python -c): not part of a worker's path.
    base_path = [p for p in sys.path if p != ""]
    try:
        _preload()
    except BaseException as exc:  # told to the server, which starts plainly
        _send(sock, {"error": f"{type(exc).__name__}: {exc}"})
        return
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    _send(sock, {"ready": True})
    while True:
        readable, _, _ = select.select([sock.fileno(), wake_r], [], [])
        if wake_r in readable:
            os.read(wake_r, 4096)
            _reap(sock)
        if sock.fileno() in readable:
            received = _receive(sock)
            if received is None:
                return  # the server is gone; PDEATHSIG takes the workers
            request, fds = received
            pid = os.fork()
            if pid == 0:
                # Told by the worker itself, so that its credentials carry its pid.
                _send(sock, {"forked": request["fork"], "pid": os.getpid()})
                sock.close()
                os.close(wake_r)
                os.close(wake_w)
                # Nothing of the tenant's runs before the server holds this process by a
                # pidfd and has moved it into the worker's cgroup (``cgroups.py``); no go, no
                # worker.
                go = os.read(fds[1], 1)
                os.close(fds[1])
                if not go:
                    os._exit(70)
                _become(request, fds[0], base_path)
            for fd in fds:
                os.close(fd)


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(sock, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    main()
