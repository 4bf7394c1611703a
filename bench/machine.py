"""Where and on what a run happened: machine, versions, commit, and how busy the machine
was with other work (figures from a shared machine are only as good as that)."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import time
from importlib import metadata
from pathlib import Path

from bench import pinning


def describe() -> dict[str, object]:
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": round(_mem_total_kib() / 2**20, 1),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "skiff_commit": _commit(),
        "skiff_version": _version("skiff"),
        "runpod_version": _version("runpod"),
        "pinning": pinning.describe(),
    }


def busy_fraction(seconds: float = 1.0) -> dict[str, float]:
    """How busy each CPU is over ``seconds`` (from /proc/stat): sampled before a benchmark,
    with nothing of ours running, it is the other load on the machine."""
    before = _cpu_times()
    time.sleep(seconds)
    after = _cpu_times()
    busy = {}
    for cpu, (idle0, total0) in before.items():
        idle1, total1 = after[cpu]
        total = total1 - total0
        busy[cpu] = round(1 - (idle1 - idle0) / total, 3) if total else 0.0
    return busy


def _cpu_times() -> dict[str, tuple[int, int]]:
    times = {}
    for line in Path("/proc/stat").read_text().splitlines():
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu":
            continue
        values = [int(v) for v in fields[:8]]
        idle = values[3] + values[4]  # idle + iowait
        times[name] = (idle, sum(values))
    return times


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total_kib() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=pinning.REPO_ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    # The figures are of the working tree: say when src/ differs from the commit.
    if git("status", "--porcelain", "--", "src"):
        commit += " + uncommitted changes in src/"
    return commit


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"
