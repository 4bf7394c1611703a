"""How many jobs to line up behind the one a default worker takes, so it never waits on its tick.

The runpod SDK's job loop (``rp_scale.JobScaler.get_jobs``) asks for work only while its queue
has room; a worker at the default concurrency of 1 is full as soon as it holds one job, and
then looks again only after a whole second (``asyncio.sleep(1)``), whether its job took 1 ms or
1 s. So an ordinary worker runs at most one short job a second, and a worker of 2-second jobs
is idle a third of the time. The SDK accepts a list in answer to a single take and runs what it
got back to back, asking again at the first tick after its queue ran dry. So when such a worker
asks (``job_in_progress=0``: it holds nothing), skiff hands it its job and lines up more
behind it (``Store.line_up_jobs``): the one-second tick is then paid once per line-up instead
of once per job.

A lined-up job has not started: it stays IN_QUEUE (``/status``, ``/health`` and the scaler say
it waits), its ``executionTimeout`` and its attempt count start only when the job before it
ends, and a lost worker's lined-up jobs go back to the queue with no attempt counted.

A lined-up job cancelled, purged or expired before its turn must not start, but nothing in the
SDK's protocol can take it back: ``run_jobs`` starts the next job of its queue as soon as the
task of the one before ends (when the answer to its job-done arrives, or when it is stopped),
with no call to the server in between; a shutdown (SIGTERM) drains the queue first; and
``stop_job`` acts only on a job whose task exists, i.e. one whose handler is already running. So
when such a job is next, the store says the line is broken (``Job.line_broken`` on the result
before it, ``Store.lineup_broken`` after a stop signal), and ``Dispatch`` has the fleet end the
worker with SIGKILL before it answers; the jobs lined up after it go back to the queue when the
exit is reported, and the scaler starts a replacement. That costs one worker start, only when a
job no longer wanted is next in line. A worker this server cannot end (an external one, or
another replica's) therefore gets nothing lined up (``Dispatch.can_end``). Should the end still
fail (the worker was stopping already), it is answered anyway and gets a stop signal for the
job, which cuts it short only once it has started; it moves past the job in the store's view
when it takes that signal.

What line-ups cost otherwise is that a job lined up on a busy worker waits its turn there even
if another worker frees up, so the line-up is kept short:

- only jobs the worker would run within ``seconds`` by the endpoint's recent execution times
  (no history yet: nothing is lined up; the job it takes counts in that time);
- never a job an idle worker of the endpoint is waiting for, and never more than its fair
  share of the queue across the endpoint's live workers, but for jobs it would start within
  one tick of the SDK: a busy worker cannot ask for those sooner than that;
- at most ``MAX_LINEUP`` jobs.

Each time a line-up runs dry, the worker waits for its next tick (half a second on average), and
a worker's first take on an endpoint with no history gets no line-up, so that tick is paid once
more. Both are kept rare for a backlog of short jobs: one finished job is history enough (the
moving average corrects it from the next), and a line-up may hold a whole fair share of a large
queue (B6 measures 160 queued 100 ms jobs on two default workers: 1.39x the ideal drain time with
three jobs of history and 64 at most, 1.16x with one and 128).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

#: The most jobs lined up behind one take (the SDK queues them all in memory).
MAX_LINEUP = 128
#: Finished jobs an endpoint needs before its execution time is trusted.
MIN_SAMPLES = 1
#: Weight of the newest execution time in the moving average.
ALPHA = 0.3
#: Execution times below this count as this (no job costs nothing).
FLOOR_SECONDS = 0.001
#: Endpoints whose execution times are remembered; the longest unseen goes first (a deleted
#: endpoint's estimate is never asked for again).
MAX_ENDPOINTS = 4096
#: The SDK's pause before a full worker looks for work again (``rp_scale``'s sleep).
TICK_SECONDS = 1.0


#: The first runpod SDK version seen to take a list in answer to its single take (its
#: ``get_job`` queues every job of a list on either route) and run the jobs back to back.
#: Older SDKs, and workers that are not the SDK, get one job per take, as the protocol says.
SDK_WITH_LINEUPS = (1, 12, 0)
_SDK_AGENT = re.compile(r"RunPod-Python-SDK/(\d+)\.(\d+)\.(\d+)")


def accepts_lineups(user_agent: str | None) -> bool:
    """Whether a worker announcing itself so takes a list on its single take."""
    found = _SDK_AGENT.search(user_agent or "")
    if found is None:
        return False
    return tuple(int(part) for part in found.groups()) >= SDK_WITH_LINEUPS


@dataclass
class _Estimate:
    mean: float = 0.0
    samples: int = 0


@dataclass(frozen=True)
class Queue:
    """What the endpoint looks like at the take."""

    #: Jobs still queued after the one just taken (lined-up ones of other workers included).
    queued: int
    #: Workers of the endpoint that are starting, idle or running (this one included).
    live_workers: int
    #: Other workers of the endpoint that hold no job: they take what is queued first.
    idle_others: int


class Lineup:
    def __init__(self, seconds: float) -> None:
        #: Predicted work a worker is handed at once, its own job included; 0 turns lining up
        #: off.
        self.seconds = seconds
        self._estimates: dict[str, _Estimate] = {}

    def observe(self, endpoint_id: str, execution_seconds: float) -> None:
        """A job of the endpoint ran this long (from its start to its result)."""
        estimate = self._estimates.pop(endpoint_id, None) or _Estimate()
        if len(self._estimates) >= MAX_ENDPOINTS:
            del self._estimates[next(iter(self._estimates))]
        self._estimates[endpoint_id] = estimate
        took = max(execution_seconds, FLOOR_SECONDS)
        if estimate.samples == 0:
            estimate.mean = took
        else:
            estimate.mean += ALPHA * (took - estimate.mean)
        estimate.samples += 1

    def expected_seconds(self, endpoint_id: str) -> float | None:
        """The endpoint's predicted execution time; None until it has enough history."""
        estimate = self._estimates.get(endpoint_id)
        if estimate is None or estimate.samples < MIN_SAMPLES:
            return None
        return estimate.mean

    def extras(self, endpoint_id: str, queue: Queue) -> int:
        """How many jobs to line up behind the one just taken."""
        if self.seconds <= 0:
            return 0
        expected = self.expected_seconds(endpoint_id)
        if expected is None:
            return 0
        expected = max(expected, FLOOR_SECONDS)
        within_time = math.floor(self.seconds / expected) - 1
        not_awaited = queue.queued - queue.idle_others
        fair_share = max(
            math.ceil((queue.queued + 1) / max(queue.live_workers, 1)) - 1,
            math.floor(TICK_SECONDS / expected) - 1,
        )
        return max(0, min(within_time, not_awaited, fair_share, MAX_LINEUP))
