"""The benchmark suite runs end to end (``python -m bench --quick``): every benchmark
produces its rows, the JSON and the plot, without errors. Speed is never asserted here: the
figures belong in docs/performance.md, not in a pass/fail."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
IDS = ["G0", "B1", "B2", "B3", "B4", "B5", "B6", "B7", "B8", "B9"]
#: The benchmarks in three runs side by side, which a smoke run can afford (its figures mean
#: nothing): the loads, the cold starts, and the default workers' ticks, each about a minute.
GROUPS = (("B1", "B2", "B3", "B4", "B8"), ("B5", "B7", "B9"), ("B6",))


def test_quick_run_produces_every_benchmark(tmp_path: Path) -> None:
    runs = {group: _start(tmp_path / "-".join(group), group) for group in GROUPS}
    seen = set()
    for group, run in runs.items():
        run.wait(timeout=600)
        stderr = (tmp_path / "-".join(group) / "stderr.log").read_text()
        if run.returncode != 0:
            # pytest.fail, not an assert: an assertion's message is cut in the middle, which
            # hid the traceback of the benchmark that failed.
            pytest.fail(f"{group} exited {run.returncode}:\n{stderr[-8000:]}", pytrace=False)
        seen |= _check_results(tmp_path / "-".join(group), ["G0", *group])
    assert sorted(seen) == sorted(IDS)


def _start(out: Path, group: tuple[str, ...]) -> subprocess.Popen[bytes]:
    out.mkdir()
    # A file, not a pipe: a run waited on after another must not block on a full pipe.
    with (out / "stderr.log").open("wb") as stderr:
        only = ",".join(group)
        return subprocess.Popen(
            [sys.executable, "-m", "bench", "--quick", "--only", only, "--out", str(out)],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )


def _check_results(out: Path, ids: list[str]) -> set[str]:
    """One run's JSON, table and plot hold each of its benchmarks, without errors."""
    results = json.loads((out / "results.json").read_text())
    assert results["machine"]["runpod_version"]
    benches = {b["id"]: b for b in results["benchmarks"]}
    assert sorted(benches) == sorted(ids)
    for bench_id, bench in benches.items():
        assert bench["failed"] is None, (bench_id, bench["failed"])
        assert bench["rows"], bench_id
        assert all(count == 0 for count in bench["errors"].values()), (bench_id, bench["errors"])

    table = (out / "results.md").read_text()
    assert "| id | figure | skiff | reference | skiff/reference | goal |" in table
    for bench_id in ids:
        assert f"| {bench_id} |" in table
    assert "FAILED" not in table

    plot = (out / "latency.png").read_bytes()
    assert plot.startswith(b"\x89PNG"), "latency.png is not a PNG"
    return set(benches)
