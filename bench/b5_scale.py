"""B5: scale from zero, phase by phase: from a job's submission to its handler running.

Each repetition creates a new endpoint (``workersMin: 0``, ``workersMax: 1``, ``flashboot:
false``), so no worker exists, and sends one ``POST /runsync``. The phases come from outside
skiff's code: the client's own clock at submit and answer, the worker's ``startedAt`` from
``GET /v1/endpoints/{id}?includeWorkers=true`` (set just before its process is spawned), the
``BENCH imported|ready|first-job`` lines the handler prints with its own ``time.time()`` (read
back with ``GET /v1/endpoints/{id}/logs``) and the job's ``startedAt`` (when the worker's
job-take claimed it, millisecond resolution) from ``GET /v2/{id}/requests``. Every clock is the
same host's wall clock. The endpoint is then deleted and its worker waited out, so the next
repetition starts from an idle machine; the first repetition of a full run is a warm-up (page
cache) and not counted.

``flashboot: true`` is not implemented in skiff yet: that row says so instead of a number.
The reference does not scale (it is one process serving requests): n/a.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

from bench import servers
from bench.common import BODY
from bench.load import percentile
from bench.results import BenchResult, Options, Row

#: (key, row label), in order; each a span between two of the moments above, in ms.
PHASES = [
    ("decision", "decision: submit -> worker spawned (startedAt)"),
    ("process", "process start: spawned -> interpreter runs handler.py"),
    ("sdk_import", "SDK import: handler.py -> runpod imported"),
    ("first_take", "first take: SDK start -> job claimed"),
    ("to_handler", "claimed -> handler runs (SDK loop tick)"),
    ("answer", "handler -> runsync answer"),
    ("to_handler_total", "total: submit -> handler runs"),
    ("total", "total: submit -> runsync answer"),
]


def run(opts: Options) -> BenchResult:
    reps = opts.pick(5, 1)
    warmups = opts.pick(1, 0)
    result = BenchResult("B5", f"scale from zero, {reps} repetitions (flashboot: false)")
    samples: list[dict[str, float]] = []
    # Only how fast a deleted endpoint's worker is stopped between repetitions.
    settings = {"SKIFF_WORKER_STOP_GRACE_SECONDS": "1"}
    with servers.skiff(opts.logs, "b5", opts.scratch, settings) as skiff:
        for rep in range(warmups + reps):
            counted = rep - warmups + 1
            opts.say(f"B5: repetition {counted} of {reps}" if counted > 0 else "B5: warm-up")
            sample = _once(skiff, opts)
            if rep >= warmups:
                samples.append(sample)
    for key, label in PHASES:
        values = sorted(s[key] for s in samples)
        cell = f"{percentile(values, 50):.1f} / {percentile(values, 99):.1f}"
        result.rows.append(Row("B5", f"{label}, ms p50 / p99", cell, "n/a: no scaling"))
    delays = sorted(s["delay_time"] for s in samples)
    result.rows += [
        Row(
            "B5",
            "job delayTime reported by skiff, ms p50 / p99",
            f"{percentile(delays, 50):.0f} / {percentile(delays, 99):.0f}",
            "n/a",
        ),
        Row("B5", "flashboot: true, submit -> handler runs", "not implemented yet", "n/a"),
    ]
    errors = sum(1 for s in samples if not s["completed"])
    result.errors = {"skiff": errors}
    result.rows.append(result.error_row())
    result.curves["B5 scale from zero, phases (ms, p50)"] = {
        "x": "phase",
        "y": "ms",
        "series": {
            "skiff": [
                [i, percentile(sorted(s[k] for s in samples), 50)]
                for i, (k, _) in enumerate(PHASES[:6])
            ],
        },
        "labels": [k for k, _ in PHASES[:6]],
    }
    result.details = {"samples": samples, "warmups": warmups}
    return result


def _once(skiff: servers.Skiff, opts: Options) -> dict[str, float]:
    endpoint = skiff.create_endpoint(
        opts.worker_env(), workersMin=0, workersMax=1, flashboot=False, idleTimeout=3600
    )
    submitted = time.time()
    answer = skiff.http.post(
        f"/v2/{endpoint}/runsync",
        params={"wait": 120_000},
        content=BODY,
        headers={"Content-Type": "application/json"},
        timeout=150,
    )
    replied = time.time()
    body = answer.json()
    worker = skiff.workers(endpoint)[0]
    marks = _marks(skiff.log_lines(endpoint))
    job = skiff.http.get(f"/v2/{endpoint}/requests", params={"limit": 1}).json()["requests"][0]
    claimed = _ts(job["startedAt"])
    spawned = float(worker["startedAt"])
    skiff.delete_endpoint(endpoint)
    if worker.get("pid"):
        skiff.wait_for("the worker to exit", lambda: _gone(int(worker["pid"])), timeout_s=30)
    ms = 1000.0
    return {
        "decision": (spawned - submitted) * ms,
        "process": (marks["imported"] - spawned) * ms,
        "sdk_import": (marks["ready"] - marks["imported"]) * ms,
        "first_take": (claimed - marks["ready"]) * ms,
        "to_handler": (marks["first-job"] - claimed) * ms,
        "answer": (replied - marks["first-job"]) * ms,
        "to_handler_total": (marks["first-job"] - submitted) * ms,
        "total": (replied - submitted) * ms,
        "delay_time": float(body.get("delayTime", -1)),
        "completed": float(answer.status_code == 200 and body.get("status") == "COMPLETED"),
    }


def _marks(lines: list[dict[str, object]]) -> dict[str, float]:
    """The handler's ``BENCH <event> <epoch>`` lines."""
    marks: dict[str, float] = {}
    for entry in lines:
        parts = str(entry["line"]).split()
        if len(parts) == 3 and parts[0] == "BENCH":
            marks.setdefault(parts[1], float(parts[2]))
    missing = {"imported", "ready", "first-job"} - set(marks)
    if missing:
        raise RuntimeError(f"the worker log lacks BENCH {sorted(missing)}: {lines[-20:]}")
    return marks


def _gone(pid: int) -> bool:
    """The process has exited (a zombie not yet reaped counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _ts(iso: str) -> float:
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
