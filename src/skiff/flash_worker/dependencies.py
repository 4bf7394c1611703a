"""A request's pip packages, installed once per dependency set into a cache, and its system
packages checked (installed only where the worker may).

The cache is a directory per Python version and set of requirements
(``<cache>/deps/py3.11-<hash>``), installed with ``pip install --target`` into a staging
directory and renamed into place when complete, so that two workers sharing the cache never see
half an install. Every worker of an endpoint shares it (``cache_root``): on the endpoint's
network volume when it has one, else in the directory skiff gives the endpoint's process
workers, else (a container) in the worker's home; ``SKIFF_FLASH_CACHE`` names another place."""

from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

#: Where an endpoint's network volume shows inside its workers.
VOLUME = Path("/runpod-volume")
#: How long one pip install may take.
PIP_SECONDS = 900.0
#: How much of pip's output a failure carries back.
OUTPUT_TAIL_CHARS = 2000


class DependencyError(RuntimeError):
    """A dependency did not install; the message names it and gives pip's (or apt's) words."""


def _writable(directory: Path) -> bool:
    return directory.is_dir() and os.access(directory, os.W_OK)


def cache_root() -> Path:
    """``SKIFF_FLASH_CACHE`` when the endpoint's env names one; else the endpoint's network
    volume; else the directory skiff gives every process worker of the endpoint
    (``SKIFF_FLASH_ENDPOINT_CACHE``, in the endpoint's sandbox); else this worker's home."""
    named = os.environ.get("SKIFF_FLASH_CACHE")
    if named:
        return Path(named)
    if _writable(VOLUME):
        return VOLUME / ".skiff-flash"
    shared = os.environ.get("SKIFF_FLASH_ENDPOINT_CACHE")
    if shared and (_writable(Path(shared)) or _writable(Path(shared).parent)):
        return Path(shared)
    return Path.home() / ".cache" / "skiff-flash"


def _tail(text: str) -> str:
    text = text.strip()
    return text if len(text) <= OUTPUT_TAIL_CHARS else "…" + text[-OUTPUT_TAIL_CHARS:]


def _say(message: str) -> None:
    # The worker's log (stderr), not the function's captured output.
    print(f"flash worker: {message}", file=sys.stderr, flush=True)


def target_for(requirements: Sequence[str], root: Path) -> Path:
    """The cache directory of this set of requirements (order and repeats do not matter)."""
    key = "\n".join(sorted(set(requirements)))
    digest = hashlib.sha256(key.encode()).hexdigest()[:20]
    return root / "deps" / f"py{sys.version_info.major}.{sys.version_info.minor}-{digest}"


def _on_path(directory: Path) -> None:
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))
        importlib.invalidate_caches()


def ensure_installed(requirements: Sequence[str], root: Path | None = None) -> bool:
    """Make ``requirements`` importable; True when this call installed them, False when the
    cache had them already. Raises ``DependencyError`` when pip fails."""
    if not requirements:
        return False
    target = target_for(requirements, root or cache_root())
    if (target / ".complete").is_file():
        _on_path(target)
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f"{target.name}.{os.getpid()}.part")
    shutil.rmtree(staging, ignore_errors=True)
    _say(f"installing {', '.join(requirements)} into {target}")
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-input",
                "--disable-pip-version-check",
                "--no-warn-script-location",
                "--target",
                str(staging),
                *requirements,
            ],
            capture_output=True,
            text=True,
            timeout=PIP_SECONDS,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise DependencyError(
            f"installing {', '.join(requirements)} took longer than {PIP_SECONDS:.0f} s"
        ) from exc
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise DependencyError(
            f"pip could not install {', '.join(requirements)} (exit {done.returncode}):\n"
            f"{_tail(done.stderr or done.stdout)}"
        )
    (staging / ".complete").write_text("\n".join(requirements) + "\n")
    try:
        staging.rename(target)
    except OSError:
        # Another worker of the endpoint finished the same set first: use its copy.
        shutil.rmtree(staging, ignore_errors=True)
        if not (target / ".complete").is_file():
            raise
    _on_path(target)
    return True


def _has_package(name: str) -> bool:
    if shutil.which(name):
        return True
    if shutil.which("dpkg-query") is None:
        return False
    done = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", name], capture_output=True, text=True
    )
    return done.returncode == 0 and done.stdout.endswith("installed")


def ensure_system(packages: Sequence[str]) -> None:
    """Every system package present; those missing installed with apt where the worker runs as
    root (a container), else ``DependencyError`` naming them."""
    missing = [p for p in packages if not _has_package(p)]
    if not missing:
        return
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        raise DependencyError(
            f"system packages {', '.join(missing)} are not installed on this worker, and it "
            "cannot install them (only a container worker running as root can): install them "
            "on the host, or use the Docker provider"
        )
    _say(f"installing system packages {', '.join(missing)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        [apt, "update", "-qq"],
        [apt, "install", "-y", "-qq", "--no-install-recommends", *missing],
    ):
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise DependencyError(
                f"apt could not install {', '.join(missing)} (exit {done.returncode}):\n"
                f"{_tail(done.stderr or done.stdout)}"
            )
