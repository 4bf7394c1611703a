"""The benchmark suite runs end to end (``python -m bench --quick``): every benchmark
produces its rows, the JSON and the plot, without errors. Speed is never asserted here: the
figures belong in docs/performance.md, not in a pass/fail."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
IDS = ["G0", "B1", "B2", "B3", "B4", "B5", "B6", "B7", "B8", "B9"]


def test_quick_run_produces_every_benchmark(tmp_path: Path) -> None:
    out = tmp_path / "results"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--quick",
            "--only",
            ",".join(i for i in IDS if i != "G0"),
            "--out",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-4000:]

    results = json.loads((out / "results.json").read_text())
    assert results["machine"]["runpod_version"]
    benches = {b["id"]: b for b in results["benchmarks"]}
    assert sorted(benches) == sorted(IDS)
    for bench_id, bench in benches.items():
        assert bench["failed"] is None, (bench_id, bench["failed"])
        assert bench["rows"], bench_id
        assert all(count == 0 for count in bench["errors"].values()), (bench_id, bench["errors"])

    table = (out / "results.md").read_text()
    assert "| id | figure | skiff | reference | skiff/reference | goal |" in table
    for bench_id in IDS:
        assert f"| {bench_id} |" in table
    assert "FAILED" not in table

    plot = (out / "latency.png").read_bytes()
    assert plot.startswith(b"\x89PNG"), "latency.png is not a PNG"
