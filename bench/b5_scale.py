"""B5: scale from zero, phase by phase: from a job's submission to its handler running.

Each repetition creates a new endpoint (``workersMin: 0``, ``workersMax: 1``), so no worker
takes jobs, and sends one ``POST /runsync``. With ``flashboot: false`` no worker exists at all;
with ``flashboot: true`` skiff keeps one started but held back (a standby: its process running,
the SDK imported, its job-take held but refused), and the repetition waits for that standby (its
``BENCH ready`` line) before it submits, so the scale-up promotes it rather than start a process.
The phases come from outside skiff's code: the client's own clock at submit and answer, the
worker's ``startedAt`` from ``GET /v1/endpoints/{id}?includeWorkers=true`` (set just before its
process is spawned; millisecond resolution, as every ``/v1`` time), the
``BENCH imported|ready|first-job`` lines the handler prints with its own ``time.time()`` (read
back with ``GET /v1/endpoints/{id}/logs``) and the job's ``startedAt`` (when the worker's
job-take claimed it, millisecond resolution) from ``GET /v2/{id}/requests``. Every clock is the
same host's wall clock. The endpoint is then deleted and its worker waited out, so the next
repetition starts from an idle machine; the first repetition of a full run is a warm-up (page
cache) and not counted.

With flashboot the process start and the SDK import happen before the submission, so its phases
are the claim (submit -> job claimed: the scaler's decision and the promotion, which wakes the
standby's held take), the SDK's tick and the answer. The reference does not scale (it is one
process serving requests): n/a.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import servers
from bench.common import BODY
from bench.load import percentile
from bench.results import BenchResult, Options, Row

#: Whether a repetition's worker (its record, as ``/v1`` showed it) has ended.
WorkerGone = Callable[[dict[str, Any]], bool]

#: With flashboot: (key, row label), in order.
FLASH_PHASES = [
    ("to_claim", "flashboot: submit -> job claimed by the promoted standby"),
    ("to_handler", "flashboot: claimed -> handler runs (SDK loop tick)"),
    ("answer", "flashboot: handler -> runsync answer"),
    ("to_handler_total", "flashboot: total: submit -> handler runs"),
    ("total", "flashboot: total: submit -> runsync answer"),
]

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
    result = BenchResult(
        "B5",
        f"scale from zero, {reps} repetitions: afresh, flashboot, sandbox off, fork servers",
    )
    samples: list[dict[str, float]] = []
    flash: list[dict[str, float]] = []
    # Only how fast a deleted endpoint's worker is stopped between repetitions.
    settings = {"SKIFF_WORKER_STOP_GRACE_SECONDS": "1"}
    with servers.skiff(opts.logs, "b5", opts.scratch, settings) as skiff:
        for mode, into, once in (("cold", samples, _once), ("flashboot", flash, _once_flashboot)):
            for rep in range(warmups + reps):
                counted = rep - warmups + 1
                label = f"repetition {counted} of {reps}" if counted > 0 else "warm-up"
                opts.say(f"B5 ({mode}): {label}")
                sample = once(skiff, opts)
                if rep >= warmups:
                    into.append(sample)
        sandboxed_forks = _sandboxed_forks(skiff, opts, reps)
    # The same cold starts without the sandbox (SKIFF_SANDBOX=off), in the same run: what the
    # sandbox costs a start (providers/bubblewrap.py), started afresh and, outside the sandbox,
    # forked from a zygote (providers/fork_server.py; the warm-up repetition's worker starts
    # afresh while the zygote starts, every counted one is forked).
    bare: list[dict[str, float]] = []
    forked: list[dict[str, float]] = []
    unsandboxed = (
        ("sandbox off", bare, {"SKIFF_SANDBOX": "off", "SKIFF_FORK_SERVERS": "off"}),
        ("sandbox off, fork server", forked, {"SKIFF_SANDBOX": "off"}),
    )
    for mode, into, extra in unsandboxed:
        with servers.skiff(opts.logs, "b5-nosandbox", opts.scratch, settings | extra) as skiff:
            for rep in range(max(1, warmups) + reps):
                opts.say(f"B5 (cold, {mode}): repetition {rep + 1 - warmups} of {reps}")
                sample = _once(skiff, opts)
                if rep >= max(1, warmups):
                    into.append(sample)
    goals = {"to_handler_total": 1500.0}
    for key, label in PHASES:
        result.rows.append(_row(label, samples, key, "n/a: no scaling", goals.get(key)))
    delays = sorted(s["delay_time"] for s in samples)
    result.rows.append(
        Row(
            "B5",
            "job delayTime reported by skiff, ms p50 / p99",
            f"{percentile(delays, 50):.0f} / {percentile(delays, 99):.0f}",
            "n/a",
        )
    )
    for key in ("process", "to_handler_total"):
        label = dict(PHASES)[key]
        result.rows.append(_row(f"sandbox off: {label}", bare, key, "n/a: no scaling", None))
    fork_goals = {"to_handler_total": 250.0}
    for key in ("process", "sdk_import", "first_take", "to_handler_total", "total"):
        label = f"fork server (sandbox off): {dict(PHASES)[key]}"
        result.rows.append(_row(label, forked, key, "n/a: no scaling", fork_goals.get(key)))
    for key in ("process", "sdk_import", "first_take", "to_handler_total", "total"):
        label = f"fork server (sandboxed, the endpoint's): {dict(PHASES)[key]}"
        result.rows.append(
            _row(label, sandboxed_forks, key, "n/a: no scaling", fork_goals.get(key))
        )
    flash_goals = {"to_handler_total": 200.0}
    for key, label in FLASH_PHASES:
        result.rows.append(_row(label, flash, key, "n/a", flash_goals.get(key)))
    errors = sum(
        1 for s in (*samples, *flash, *bare, *forked, *sandboxed_forks) if not s["completed"]
    )
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
    result.details = {
        "samples": samples,
        "flashboot_samples": flash,
        "no_sandbox_samples": bare,
        "fork_server_samples": forked,
        "sandboxed_fork_server_samples": sandboxed_forks,
        "warmups": warmups,
    }
    return result


def _row(
    label: str, samples: list[dict[str, float]], key: str, reference: str, goal_ms: float | None
) -> Row:
    values = sorted(s[key] for s in samples)
    p50 = percentile(values, 50)
    cell = f"{p50:.1f} / {percentile(values, 99):.1f}"
    if goal_ms is None:
        return Row("B5", f"{label}, ms p50 / p99", cell, reference)
    return Row(
        "B5", f"{label}, ms p50 / p99", cell, reference, f"p50 <= {goal_ms:,.0f} ms", p50 <= goal_ms
    )


def _once_flashboot(skiff: servers.Skiff, opts: Options) -> dict[str, float]:
    endpoint = skiff.create_endpoint(
        opts.worker_env(), workersMin=0, workersMax=1, flashboot=True, idleTimeout=3600
    )

    def standby_ready() -> bool:
        workers = skiff.workers(endpoint)
        if not (len(workers) == 1 and workers[0]["state"] == "standby"):
            return False
        return any(str(e["line"]).startswith("BENCH ready") for e in skiff.log_lines(endpoint))

    skiff.wait_for("the standby worker", standby_ready, timeout_s=60, every_s=0.2)
    # The SDK starts its job-take right after "ready": give it a moment to be held.
    time.sleep(0.5)
    t = _one_job(skiff, endpoint)
    ms = 1000.0
    return {
        "to_claim": (t.claimed - t.submitted) * ms,
        "to_handler": (t.marks["first-job"] - t.claimed) * ms,
        "answer": (t.replied - t.marks["first-job"]) * ms,
        "to_handler_total": (t.marks["first-job"] - t.submitted) * ms,
        "total": (t.replied - t.submitted) * ms,
        "completed": float(t.completed),
    }


def _once(
    skiff: servers.Skiff, opts: Options, worker_gone: WorkerGone | None = None
) -> dict[str, float]:
    """One cold start, phase by phase (ms). ``worker_gone``: whether the repetition's worker
    has ended (by default: its process on this host has exited)."""
    endpoint = skiff.create_endpoint(
        opts.worker_env(), workersMin=0, workersMax=1, flashboot=False, idleTimeout=3600
    )
    return _phases(_one_job(skiff, endpoint, worker_gone))


def _sandboxed_forks(skiff: servers.Skiff, opts: Options, reps: int) -> list[dict[str, float]]:
    """Cold starts of one sandboxed endpoint scaled to zero after each job: the first starts
    afresh and its zygote starts in the endpoint's sandbox; once that is ready, every counted
    one comes out of it."""
    endpoint = skiff.create_endpoint(
        opts.worker_env(), workersMin=0, workersMax=1, flashboot=False, idleTimeout=3600
    )
    _one_job(skiff, endpoint, delete=False)
    homes = f"in the sandbox of {(skiff.data_dir / 'workers' / endpoint).resolve()} is ready"
    skiff.wait_for("the endpoint's zygote", lambda: homes in skiff.tail_log(10**6), 60)
    samples = []
    for rep in range(reps):
        opts.say(f"B5 (cold, sandboxed, fork server): repetition {rep + 1} of {reps}")
        skiff.update_endpoint(endpoint, workersMax=1)
        samples.append(_phases(_one_job(skiff, endpoint, delete=False)))
    skiff.delete_endpoint(endpoint)
    return samples


def _phases(t: _Timed) -> dict[str, float]:
    spawned = _ts(t.worker["startedAt"])
    marks = t.marks
    ms = 1000.0
    return {
        "decision": (spawned - t.submitted) * ms,
        "process": (marks["imported"] - spawned) * ms,
        "sdk_import": (marks["ready"] - marks["imported"]) * ms,
        "first_take": (t.claimed - marks["ready"]) * ms,
        "to_handler": (marks["first-job"] - t.claimed) * ms,
        "answer": (t.replied - marks["first-job"]) * ms,
        "to_handler_total": (marks["first-job"] - t.submitted) * ms,
        "total": (t.replied - t.submitted) * ms,
        "to_claim": (t.claimed - t.submitted) * ms,
        "delay_time": float(t.body.get("delayTime", -1)),
        "completed": float(t.completed),
    }


@dataclass
class _Timed:
    """One ``/runsync`` on a fresh endpoint: the moments B5's phases are cut from."""

    submitted: float
    replied: float
    claimed: float
    body: dict[str, Any]
    completed: bool
    worker: dict[str, Any]
    marks: dict[str, float]


def _one_job(
    skiff: servers.Skiff,
    endpoint: str,
    worker_gone: WorkerGone | None = None,
    delete: bool = True,
) -> _Timed:
    """Send the job, read back the moments, then delete the endpoint (unless ``delete`` is
    false) and wait its worker out."""
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
    marks = _worker_marks(skiff, endpoint, worker["id"])
    job = skiff.http.get(f"/v2/{endpoint}/requests", params={"limit": 1}).json()["requests"][0]
    if delete:
        skiff.delete_endpoint(endpoint)
    else:
        skiff.update_endpoint(endpoint, workersMax=0)
    gone = worker_gone or _process_gone
    skiff.wait_for("the worker to exit", lambda: gone(worker), timeout_s=60)
    completed = answer.status_code == 200 and body.get("status") == "COMPLETED"
    return _Timed(submitted, replied, _ts(job["startedAt"]), body, completed, worker, marks)


def _worker_marks(skiff: servers.Skiff, endpoint: str, worker_id: str) -> dict[str, float]:
    """The worker's BENCH marks, waited for: its output reaches the log through a pipe the
    server reads on its own time, so on a loaded machine the answer can come back before the
    handler's last line is in the log."""
    deadline = time.monotonic() + 30
    while True:
        lines = [e for e in skiff.log_lines(endpoint) if e.get("worker") == worker_id]
        try:
            return _marks(lines)
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.1)


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


def _process_gone(worker: dict[str, Any]) -> bool:
    """The worker's process on this host has exited (or it never had one)."""
    return not worker.get("pid") or _gone(int(worker["pid"]))


def _gone(pid: int) -> bool:
    """The process has exited (a zombie not yet reaped counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _ts(iso: str) -> float:
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
