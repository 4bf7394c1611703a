"""What a benchmark hands back: table rows, latency samples for the plot, notes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.load import LoadResult

#: A cell: a number, a sentence ("n/a: ...", "not implemented yet") or nothing.
Cell = float | str | None


@dataclass
class Row:
    bench: str
    figure: str
    skiff: Cell
    reference: Cell = None
    goal: str = ""
    #: Whether the goal is met; None where the row has no goal that a number can check.
    met: bool | None = None
    #: Digits after the point when the cells are printed.
    digits: int = 0
    #: A name other code finds the row by (``__main__.cross_rows``).
    key: str = ""

    @property
    def ratio(self) -> float | None:
        if isinstance(self.skiff, float | int) and isinstance(self.reference, float | int):
            return self.skiff / self.reference if self.reference else None
        return None


@dataclass
class BenchResult:
    id: str
    title: str
    rows: list[Row] = field(default_factory=list)
    #: Latency plot panels: title -> {series label ("skiff", "reference", ...): ms samples}.
    latencies: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    #: Other plot panels: title -> {"x": axis label, "y": axis label, "series": {label:
    #: [[x, y], ...]}}.
    curves: dict[str, dict[str, object]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: Non-2xx answers and failed connections of every measured request, per side.
    errors: dict[str, int] = field(default_factory=dict)
    #: Anything else worth keeping in results.json (raw summaries, settings).
    details: dict[str, object] = field(default_factory=dict)
    failed: str | None = None
    #: How busy each CPU was with other work just before the benchmark ("cpu0": 0.02, ...).
    background_cpu_busy: dict[str, float] = field(default_factory=dict)

    def add_errors(self, side: str, result: LoadResult) -> None:
        self.errors[side] = self.errors.get(side, 0) + result.errors
        if result.first_error and f"first_error_{side}" not in self.details:
            self.details[f"first_error_{side}"] = result.first_error

    def error_row(self) -> Row:
        return Row(
            self.id,
            "errors (non-2xx answers + failed connections)",
            float(self.errors.get("skiff", 0)),
            float(self.errors["reference"]) if "reference" in self.errors else "n/a",
        )


def summary(result: LoadResult) -> dict[str, object]:
    """A load result for results.json, without its raw samples."""
    return {
        "requests": result.requests,
        "errors": result.errors,
        "statuses": result.statuses,
        "elapsed_s": round(result.elapsed_s, 4),
        "rate": round(result.rate, 1),
        "p50_ms": round(result.p50_ms, 3),
        "p90_ms": round(result.p90_ms, 3),
        "p99_ms": round(result.p99_ms, 3),
        "max_ms": round(result.max_ms, 3),
        "mean_ms": round(result.mean_ms, 3),
        "generator_cpu": round(result.generator_cpu, 3),
        "server_cpu_us_per_request": round(result.server_cpu_us, 1),
        "workers_cpu_us_per_request": round(result.workers_cpu_us, 1),
    }


@dataclass
class Options:
    quick: bool
    out: Path
    #: Scratch space: data directories of the skiff servers, removed after the run.
    scratch: Path
    b4_jobs: int
    #: ``RUNPOD_LOG_LEVEL`` of the workers and the reference; None keeps the SDK's default.
    sdk_log_level: str | None
    #: ``BENCH_CONCURRENCY`` of skiff's workers (the SDK's concurrency_modifier).
    worker_concurrency: int
    #: Called with a line of progress (stderr).
    say: Callable[[str], None]

    @property
    def logs(self) -> Path:
        return self.out / "logs"

    def pick(self, full: int, quick: int) -> int:
        return quick if self.quick else full

    def worker_env(self) -> dict[str, str]:
        """The environment of skiff's bench workers (an endpoint's ``env``)."""
        env = {"BENCH_CONCURRENCY": str(self.worker_concurrency)}
        if self.sdk_log_level:
            env["RUNPOD_LOG_LEVEL"] = self.sdk_log_level
        return env
