"""B7: scale from zero on a Ray cluster, beside the local provider, in one run: from a job's
arrival to the first take of the worker started for it.

A Ray cluster of two CPU nodes on this machine (``bench/ray_nodes.py``: a head and a worker
node, each in a PID namespace of its own) and two servers: one with the local provider, one
with ``SKIFF_PROVIDER=ray`` on that cluster. Each repetition is B5's cold start (a new endpoint,
``workersMin: 0``, one ``/runsync``), phase by phase from the same moments: on Ray the
"decision" phase also holds placing the worker's actor on a node (the worker's ``startedAt`` is
recorded once the actor runs its process). The first repetition of a full run on each server is
a warm-up, not counted. The reference (the runpod SDK's local test server) does not scale: the
local provider is what the Ray figures are compared with, as a ratio.
"""

from __future__ import annotations

from typing import Any

from bench import b5_scale, servers
from bench.load import percentile
from bench.ray_nodes import ray_available, ray_cluster
from bench.results import BenchResult, Options, Row

#: (key, row label), in order.
PHASES = [
    ("decision", "decision and placement: submit -> worker spawned"),
    ("process", "process start: spawned -> interpreter runs handler.py"),
    ("sdk_import", "SDK import: handler.py -> runpod imported"),
    ("first_take", "first take: SDK start -> job claimed"),
    ("to_claim", "job arrival -> its worker's first take"),
    ("total", "total: submit -> runsync answer"),
]


def run(opts: Options) -> BenchResult:
    result = BenchResult("B7", "scale from zero: Ray provider beside the local provider")
    problem = ray_available()
    if problem is not None:
        result.notes.append(f"not run: {problem}")
        result.rows.append(Row("B7", "job arrival -> first take, Ray / local", f"n/a: {problem}"))
        return result
    reps = opts.pick(5, 1)
    warmups = opts.pick(1, 0)
    settings = {"SKIFF_WORKER_STOP_GRACE_SECONDS": "1"}
    local: list[dict[str, float]] = []
    on_ray: list[dict[str, float]] = []
    with ray_cluster(opts.scratch / "ray", [None, None], cpus=2) as cluster:

        def actor_gone(_worker: dict[str, Any]) -> bool:
            return not cluster.actors("skiff")

        with servers.skiff(opts.logs, "b7-local", opts.scratch, settings) as skiff:
            _repeat(skiff, opts, "local", local, reps, warmups)
        ray_settings = settings | {"SKIFF_PROVIDER": "ray", "SKIFF_RAY_ADDRESS": cluster.address}
        with servers.skiff(opts.logs, "b7-ray", opts.scratch, ray_settings) as skiff:
            _repeat(skiff, opts, "ray", on_ray, reps, warmups, actor_gone)
    for key, label in PHASES:
        for side, samples in (("local provider", local), ("Ray provider", on_ray)):
            values = sorted(s[key] for s in samples)
            cell = f"{percentile(values, 50):.1f} / {percentile(values, 99):.1f}"
            result.rows.append(Row("B7", f"{side}: {label}, ms p50 / p99", cell, "n/a"))
    ratio = _p50(on_ray, "to_claim") / _p50(local, "to_claim")
    result.rows.append(
        Row("B7", "job arrival -> first take, p50, Ray / local", round(ratio, 2), digits=2)
    )
    errors = sum(1 for s in (*local, *on_ray) if not s["completed"])
    result.errors = {"skiff": errors}
    result.rows.append(result.error_row())
    result.details = {"local": local, "ray": on_ray, "warmups": warmups}
    return result


def _repeat(
    skiff: servers.Skiff,
    opts: Options,
    side: str,
    into: list[dict[str, float]],
    reps: int,
    warmups: int,
    worker_gone: b5_scale.WorkerGone | None = None,
) -> None:
    for rep in range(warmups + reps):
        counted = rep - warmups + 1
        opts.say(
            f"B7 ({side}): " + (f"repetition {counted} of {reps}" if counted > 0 else "warm-up")
        )
        sample = b5_scale._once(skiff, opts, worker_gone)
        if rep >= warmups:
            into.append(sample)


def _p50(samples: list[dict[str, float]], key: str) -> float:
    return percentile(sorted(s[key] for s in samples), 50)
