"""The outputs of a run: the table (printed, and ``results.md``), ``results.json`` and the
plot ``latency.png`` (latency CDFs, skiff against the reference, plus B4's and B5's curves)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

from bench.results import BenchResult, Cell, Row

if TYPE_CHECKING:
    from matplotlib.axes import Axes

# matplotlib is imported when a plot is drawn, so the rest of the suite imports without it.

HEADER = "| id | figure | skiff | reference | skiff/reference | goal |"
RULE = "|---|---|---:|---:|---:|---|"


def cell(value: Cell, digits: int) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if math.isnan(value):
        return "n/a"
    return f"{value:,.{digits}f}"


def goal(row: Row) -> str:
    if not row.goal:
        return ""
    if row.met is None:
        return row.goal
    return f"{row.goal} ({'met' if row.met else 'not met'})"


def table(results: list[BenchResult]) -> str:
    lines = [HEADER, RULE]
    for result in results:
        if result.failed:
            lines.append(f"| {result.id} | FAILED: {result.failed} | | | | |")
            continue
        for row in result.rows:
            ratio = f"{row.ratio:.2f}x" if row.ratio is not None else ""
            lines.append(
                f"| {row.bench} | {row.figure} | {cell(row.skiff, row.digits)} "
                f"| {cell(row.reference, row.digits)} | {ratio} | {goal(row)} |"
            )
    return "\n".join(lines)


def preamble(machine: dict[str, object]) -> str:
    keys = [
        ("date", "date (UTC)"),
        ("cpu", "CPU"),
        ("cores", "cores"),
        ("memory_gib", "memory (GiB)"),
        ("os", "OS"),
        ("python", "Python"),
        ("skiff_commit", "skiff commit"),
        ("runpod_version", "runpod"),
        ("pinning", "pinning"),
        ("background", "background"),
        ("options", "options"),
    ]
    return "\n".join(f"- {label}: {machine[key]}" for key, label in keys if key in machine)


def notes(results: list[BenchResult]) -> str:
    lines = [f"- {r.id}: {note}" for r in results for note in r.notes]
    return "\n".join(lines)


def markdown(machine: dict[str, object], results: list[BenchResult]) -> str:
    parts = [preamble(machine), "", table(results)]
    extra = notes(results)
    if extra:
        parts += ["", extra]
    return "\n".join(parts) + "\n"


def write_json(path: Path, machine: dict[str, object], results: list[BenchResult]) -> None:
    def bench(result: BenchResult) -> dict[str, object]:
        data = dataclasses.asdict(result)
        # Raw samples are in the plot; the file keeps the figures.
        data.pop("latencies")
        data["rows"] = [dataclasses.asdict(r) | {"ratio": r.ratio} for r in result.rows]
        return data

    payload = {"machine": machine, "benchmarks": [bench(r) for r in results]}
    path.write_text(json.dumps(payload, indent=2, default=str, allow_nan=False) + "\n")


def plot(path: Path, results: list[BenchResult]) -> None:
    """One panel per latency distribution (CDF, log-scaled ms) and per curve."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    cdfs = [(t, s) for r in results for t, s in r.latencies.items()]
    curves = [(t, c) for r in results for t, c in r.curves.items()]
    count = len(cdfs) + len(curves)
    columns = 2
    rows = max(1, math.ceil(count / columns))
    fig, axes = plt.subplots(rows, columns, figsize=(12, 3.6 * rows), squeeze=False)
    flat = list(axes.flat)
    for ax, (title, series) in zip(flat, cdfs, strict=False):
        _cdf(ax, title, series)
    for ax, (title, spec) in zip(flat[len(cdfs) :], curves, strict=False):
        _curve(ax, title, spec)
    for ax in flat[count:]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _cdf(ax: Axes, title: str, series: dict[str, list[float]]) -> None:
    from matplotlib.ticker import FuncFormatter, NullFormatter

    for label, samples in series.items():
        if not samples:
            continue
        ordered = sorted(max(v, 1e-3) for v in samples)
        fraction = [(i + 1) / len(ordered) for i in range(len(ordered))]
        style = "--" if label.startswith("reference") else "-"
        ax.plot(ordered, fraction, style, label=label)
    ax.set_xscale("log")
    # Plain numbers on the log axis (1, 10, 100), no crowded minor labels.
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("latency (ms, log scale)")
    ax.set_ylabel("fraction of requests")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")


def _curve(ax: Axes, title: str, spec: dict[str, object]) -> None:
    from matplotlib.ticker import FuncFormatter

    series = spec["series"]
    assert isinstance(series, dict)
    labels = spec.get("labels")
    for label, points in series.items():
        xs = [p[0] for p in points]
        ys = [p[1] for p in points]
        if isinstance(labels, list):
            ax.bar(xs, ys, label=label)
            ax.set_xticks(xs, labels[: len(xs)], rotation=20, fontsize="small")
        else:
            ax.plot(xs, ys, "o-", label=label)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:,.0f}"))
    ax.set_ylim(bottom=0)  # from zero, so a small drift does not look like a trend
    ax.set_xlabel(str(spec["x"]))
    ax.set_ylabel(str(spec["y"]))
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
