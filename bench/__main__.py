"""``python -m bench``: run the benchmarks on skiff and on the reference (the runpod SDK's local
test server) in one run, print the table, write ``results.json``, ``results.md`` and
``latency.png`` into ``--out`` (default ``bench/results/``).

The generator's ceiling (G0) is measured in every run: it is what tells whether a figure is
the server's or the generator's. A benchmark that fails is reported as FAILED and the others
still run; the exit status is then 1.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from bench import (
    b1_run,
    b2_runsync,
    b3_drain,
    b4_queue,
    b5_scale,
    b6_default_workers,
    b7_ray,
    b8_lb,
    b9_flash,
    g0_generator,
    machine,
    pinning,
    report,
)
from bench.results import BenchResult, Options, Row

BENCHMARKS: dict[str, Callable[[Options], BenchResult]] = {
    "G0": g0_generator.run,
    "B1": b1_run.run,
    "B2": b2_runsync.run,
    "B3": b3_drain.run,
    "B4": b4_queue.run,
    "B5": b5_scale.run,
    "B6": b6_default_workers.run,
    "B7": b7_ray.run,
    "B8": b8_lb.run,
    "B9": b9_flash.run,
}
DEFAULT_OUT = pinning.REPO_ROOT / "bench" / "results"
#: B4's queue in a full run. A million jobs take about 7 minutes to queue at the /run rate
#: measured on the 2-core machine of docs/performance.md; pass --b4-jobs to change it.
DEFAULT_B4_JOBS = 1_000_000
QUICK_B4_JOBS = 3_000


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--only", help="comma-separated ids, e.g. B1,B2 (G0 always runs)")
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke run")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    parser.add_argument(
        "--b4-jobs",
        type=int,
        default=None,
        help=f"B4's queue size (default {DEFAULT_B4_JOBS:,}; --quick {QUICK_B4_JOBS:,})",
    )
    parser.add_argument(
        "--worker-concurrency",
        type=int,
        default=1024,
        help="jobs one SDK worker holds at once (its concurrency_modifier; default 1024)",
    )
    parser.add_argument(
        "--sdk-log-level",
        default=None,
        help="RUNPOD_LOG_LEVEL of the workers and the reference (default: the SDK's, DEBUG)",
    )
    return parser.parse_args(argv)


def selected(only: str | None) -> list[str]:
    if not only:
        return list(BENCHMARKS)
    wanted = {name.strip().upper() for name in only.split(",") if name.strip()}
    unknown = wanted - set(BENCHMARKS)
    if unknown:
        raise SystemExit(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    return [name for name in BENCHMARKS if name in wanted or name == "G0"]


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    # SystemExit unwinds the with-blocks, so every server started so far is stopped.
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    names = selected(args.only)
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    # The orchestrator only waits and polls; keep it off the server's CPU.
    pinning.pin_to_load_cpu()
    scratch = Path(tempfile.mkdtemp(prefix="skiff-bench-"))

    def say(line: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)

    b4_jobs = args.b4_jobs or (QUICK_B4_JOBS if args.quick else DEFAULT_B4_JOBS)
    opts = Options(
        quick=args.quick,
        out=out,
        scratch=scratch,
        b4_jobs=b4_jobs,
        sdk_log_level=args.sdk_log_level,
        worker_concurrency=args.worker_concurrency,
        say=say,
    )
    info = machine.describe()
    info["options"] = (
        f"{'quick' if args.quick else 'full'}; B4 jobs {b4_jobs:,}; worker concurrency "
        f"{args.worker_concurrency}; SDK log level {args.sdk_log_level or 'SDK default'}"
    )
    results: list[BenchResult] = []
    try:
        for name in names:
            background = machine.busy_fraction(0.5)
            started = time.monotonic()
            try:
                result = BENCHMARKS[name](opts)
            except Exception as exc:
                say(f"{name} FAILED:\n{traceback.format_exc()}")
                result = BenchResult(name, name, failed=f"{type(exc).__name__}: {exc}"[:300])
            result.background_cpu_busy = background
            result.details["seconds"] = round(time.monotonic() - started, 1)
            say(f"{name} done in {result.details['seconds']} s")
            results.append(result)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    cross_rows(results)
    busiest = {
        cpu: max(r.background_cpu_busy.get(cpu, 0.0) for r in results) for cpu in ("cpu0", "cpu1")
    }
    info["background"] = "other load on the machine just before a benchmark, at most: " + ", ".join(
        f"{cpu} {busy:.0%}" for cpu, busy in busiest.items()
    )
    text = report.markdown(info, results)
    (out / "results.md").write_text(text)
    report.write_json(out / "results.json", info, results)
    report.plot(out / "latency.png", results)
    print(text)
    print(f"written: {out / 'results.md'}, {out / 'results.json'}, {out / 'latency.png'}")
    return 1 if any(r.failed for r in results) else 0


def cross_rows(results: list[BenchResult]) -> None:
    """Figures that need two benchmarks: B4's full-queue /run rate against B1's, B6's default
    workers against B2's, and a note wherever a rate comes near the generator's ceiling."""
    by_id = {r.id: r for r in results if not r.failed}
    b1, b4, g0 = by_id.get("B1"), by_id.get("B4"), by_id.get("G0")
    b2, b6 = by_id.get("B2"), by_id.get("B6")
    if b2 and b6:
        _against_b2(b2, b6)
    if b1 and b4:
        b1_rate = _number(_row(b1, "rate").skiff)
        full = _row(b4, "run_full")
        full_rate = _number(full.skiff)
        if b1_rate and full_rate is not None:
            share = full_rate / b1_rate
            b4.rows.insert(
                b4.rows.index(full) + 2,
                Row(
                    "B4",
                    "/run jobs/s, full queue / B1's empty-queue figure (%)",
                    share * 100,
                    "n/a",
                    ">= 80%",
                    share >= 0.8,
                ),
            )
    if g0:
        ceiling = _number(g0.rows[0].skiff)
        for result in results:
            for row in result.rows:
                rate_row = "jobs/s" in row.figure and "(%)" not in row.figure
                if result is g0 or not rate_row or not ceiling:
                    continue
                for side, value in (("skiff", row.skiff), ("reference", row.reference)):
                    rate = _number(value)
                    if rate and rate > 0.5 * ceiling:
                        result.notes.append(
                            f"{side} '{row.figure}' is {rate / ceiling:.0%} of the generator's "
                            "ceiling: the generator may be part of that limit"
                        )


def _against_b2(b2: BenchResult, b6: BenchResult) -> None:
    """B6's default workers at 16 connections as a share of B2's rate and a multiple of its
    p50 (issue 15's goal for them)."""
    rate, b2_rate = _number(_row(b6, "rate_16").skiff), _number(_row(b2, "rate_16").skiff)
    if rate is not None and b2_rate:
        share = _row(b6, "b2_rate_share")
        share.skiff = rate / b2_rate * 100
        share.met = rate / b2_rate >= 0.5
    p50, b2_p50 = _number(_row(b6, "p50_16").skiff), _number(_row(b2, "p50_16").skiff)
    if p50 is not None and b2_p50:
        ratio = _row(b6, "b2_p50_ratio")
        ratio.skiff = p50 / b2_p50
        ratio.met = p50 / b2_p50 <= 2


def _row(result: BenchResult, key: str) -> Row:
    return next(row for row in result.rows if row.key == key)


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, float | int) else None


if __name__ == "__main__":
    sys.exit(main())
