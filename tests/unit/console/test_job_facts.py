"""The job page's facts (``_job_live.html``) say where a job is as ``/status`` does: a job
lined up on a worker (services/lineup.py) has not started there yet."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import skiff.console
from service_stubs import a_job
from skiff.console.job_pages import timings
from skiff.console.render import environment
from skiff.domain.jobs import Job, JobStatus

TEMPLATES = Path(skiff.console.__file__).parent / "templates"
NOW = 1_000.0


def _facts(job: Job) -> str:
    worker_line = next(
        line
        for line in environment(TEMPLATES)
        .get_template("_job_live.html")
        .render(
            job=job,
            times=timings(job, NOW),
            final=False,
            retryable=False,
            base="/console",
            endpoint=SimpleNamespace(id="ep1"),
            visitor=SimpleNamespace(csrf="token"),
        )
        .splitlines()
        if "<dt>Worker</dt>" in line
    )
    return worker_line


QUEUED = a_job(submitted_at=NOW - 5)


def test_a_queued_job_names_no_worker() -> None:
    assert "—" in _facts(QUEUED) and "worker=" not in _facts(QUEUED)


def test_a_lined_up_job_says_it_waits_on_its_worker() -> None:
    facts = _facts(replace(QUEUED, worker_id="w1", lease_until=NOW + 30))
    assert "lined up on" in facts and "worker=w1" in facts


def test_a_running_job_names_its_worker() -> None:
    running = replace(QUEUED, status=JobStatus.IN_PROGRESS, worker_id="w1", started_at=NOW - 1)
    facts = _facts(running)
    assert "worker=w1" in facts and "lined up" not in facts


def test_a_lined_up_job_cancelled_before_its_turn_names_no_worker() -> None:
    cancelled = replace(QUEUED, status=JobStatus.CANCELLED, worker_id="w1", finished_at=NOW)
    assert "—" in _facts(cancelled) and "w1" not in _facts(cancelled)
