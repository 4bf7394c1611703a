"""Sessions inside pods: who may get in, what each session is, and when it ends.

A session is a process in a running pod (``providers/pod_entry.py``) that a user opened through
SSH (``skiff/ssh``) or the console's terminal (``console/terminal_pages.py``). Only the pod's
owner gets in: over SSH with one of the public keys of their settings, in the console with a
session allowed to write pods. Each opening and closing goes into the pod's log with who and
from where; a session ends when its process does, when the pod stops or restarts (its provider
ends it), after ``idle_seconds`` without a byte either way, or once the way it came in would
no longer let its caller in (the key taken out of their settings or revoked, the console
sign-in expired, the user disabled): ``sweep``, every ``SWEEP_SECONDS``, on the injected clock.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from attrs import define, field

from skiff.clock import Clock
from skiff.domain.pod_sessions import EntryRequest, TerminalSize
from skiff.domain.pods import Pod, runtime_status
from skiff.domain.users import User
from skiff.errors import Conflict, NotFound
from skiff.providers.base import EntryRefused, PodEntry
from skiff.services.logs import PodLogs
from skiff.services.pod_runner import PodRunner
from skiff.services.wakeups import Wakeups
from skiff.store.base import Store
from skiff.store.outages import unavailable

log = logging.getLogger(__name__)

#: How often idle sessions, and those whose caller may no longer get in, are looked for.
SWEEP_SECONDS = 5.0
#: Sessions one user may have open at once, across their pods (each holds a process and a
#: few of the server's file descriptors).
MAX_SESSIONS_PER_USER = 32
#: How long a pod may take to let a session in (a container's ``docker exec``).
ENTER_SECONDS = 60.0
#: How long one session's access check at a sweep may take before it counts as not known.
CHECK_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class Caller:
    """Who opens a session, for the pod's log: the user, how (``ssh``, ``console``), from
    where (the client's address) and with what (a key's fingerprint, a console sign-in)."""

    user: User
    via: str
    origin: str
    credential: str = ""

    def described(self) -> str:
        using = f", {self.credential}" if self.credential else ""
        return f"{self.user.name} ({self.user.id}) from {self.origin} over {self.via}{using}"


@dataclass(frozen=True, slots=True)
class Door:
    """A pod as SSH sees it before anyone is in: its owner and the public keys that open it."""

    pod: Pod
    owner: User
    keys: str


#: Whether what let a session's caller in would still let them in now (their key, their
#: console sign-in): asked at every sweep while the session is open.
StillAllowed = Callable[[], Awaitable[bool]]


@dataclass(eq=False)
class Session:
    """An open session: its process, and when a byte last went either way."""

    id: int
    pod_id: str
    caller: Caller
    entry: PodEntry
    opened_at: float
    last_active: float
    still_allowed: StillAllowed
    #: Why it was ended by skiff rather than by its process or client (idle), for its closing.
    ended_because: str | None = None


@define(eq=False, repr=False, slots=False)
class PodShells:
    _store: Store
    _clock: Clock
    _runner: PodRunner
    _logs: PodLogs
    _wakeups: Wakeups
    #: A session without traffic for this long is ended; 0: never.
    idle_seconds: float
    #: The server's SSH port once it listens (``skiff/ssh``), for the pages that show it.
    gateway_port: int | None = field(init=False, default=None)
    _ids: itertools.count[int] = field(init=False, factory=lambda: itertools.count(1))
    _open: dict[int, Session] = field(init=False, factory=dict)

    async def door(self, pod_id: str) -> Door | None:
        """The pod ``pod_id`` with its owner and their keys, when it runs on this replica and
        its owner may get in (not disabled); None otherwise, whoever asks."""
        pod = await self._store.find_pod(pod_id)
        if pod is None or not self._runs_here(pod):
            return None
        found = await self._user_with_keys(pod.userId)
        return None if found is None else Door(pod, *found)

    async def keys_of(self, user_id: str) -> str | None:
        """The public keys of the user's settings, or None when the user is gone or disabled:
        what an open SSH session is checked against (the pod's own state is not theirs: a
        pod that stops ends its sessions itself, saying so)."""
        found = await self._user_with_keys(user_id)
        return None if found is None else found[1]

    async def _user_with_keys(self, user_id: str) -> tuple[User, str] | None:
        """The user and the public keys of their settings, unless they are gone or disabled."""
        user = await self._store.get_user(user_id)
        if user is None or user.disabled:
            return None
        return user, await self._store.get_pub_key(user.id) or ""

    def _runs_here(self, pod: Pod) -> bool:
        return runtime_status(pod) == "running" and any(
            i.pod_id == pod.id for i in self._runner.provider.running()
        )

    async def open(
        self,
        caller: Caller,
        pod_id: str,
        request: EntryRequest,
        still_allowed: StillAllowed,
    ) -> Session:
        """A session in the caller's own pod: ``NotFound`` for another's or none, ``Conflict``
        for one that does not run (here). ``still_allowed``: asked at each sweep; the session
        ends once it says no."""
        pod = await self._store.get_pod(caller.user.id, pod_id)
        if pod is None:
            raise NotFound(f"pod {pod_id} not found")
        if not self._runs_here(pod):
            raise Conflict(
                f"pod {pod_id} is {runtime_status(pod)}, not running on this server: a session "
                "opens in a running pod"
            )
        mine = sum(1 for s in self._open.values() if s.caller.user.id == caller.user.id)
        if mine >= MAX_SESSIONS_PER_USER:
            raise Conflict(
                f"you have {mine} sessions open in your pods, the most one user may: "
                "close one first"
            )
        try:
            async with asyncio.timeout(ENTER_SECONDS):
                entry = await self._runner.provider.enter(pod_id, request)
        except EntryRefused as refused:
            raise Conflict(str(refused)) from refused
        except TimeoutError:
            raise Conflict(
                f"pod {pod_id} did not let a session in within {ENTER_SECONDS:.0f} s"
            ) from None
        now = self._clock.now()
        session = Session(next(self._ids), pod_id, caller, entry, now, now, still_allowed)
        self._open[session.id] = session
        what = "a shell" if request.command is None else f"the command {request.command!r}"
        terminal = " on a terminal" if request.terminal is not None else ""
        await self._note(
            pod_id, f"session {session.id} opened by {caller.described()}: {what}{terminal}"
        )
        return session

    def touch(self, session: Session) -> None:
        """A byte went through: the session is not idle."""
        session.last_active = self._clock.now()

    def resize(self, session: Session, size: TerminalSize) -> None:
        self.touch(session)
        session.entry.resize(size)

    async def close(self, session: Session, code: int | None) -> None:
        """The session is over (its process ended with ``code``, or its client left: None):
        its process ends, and its end goes into the pod's log, once."""
        if self._open.pop(session.id, None) is None:
            return
        session.entry.end()
        lasted = self._clock.now() - session.opened_at
        how = f"exit code {code}" if code is not None else "the client left"
        if session.ended_because is not None:
            how = session.ended_because
        who = session.caller.user.name
        await self._note(
            session.pod_id, f"session {session.id} of {who} closed after {lasted:.0f} s: {how}"
        )

    async def ending(self, session: Session, code: int | None) -> str:
        """How a session ended, in words for its user: why skiff ended it, else what became
        of its pod around it, else its process's exit code."""
        if session.ended_because is not None:
            return session.ended_because
        try:
            pod = await self._store.get_pod(session.caller.user.id, session.pod_id)
        except Exception:
            # The store could not say: the exit code is what is known for sure.
            log.warning("pod %s: its state after a session", session.pod_id, exc_info=True)
            return f"exit code {code}"
        if pod is None:
            return "the pod was deleted"
        status = runtime_status(pod)
        if status == "running":
            return f"exit code {code}" if code is not None else "its process did not exit"
        if status in ("stopping", "stopped"):
            return "the pod stopped"
        if status in ("restarting", "starting"):
            return "the pod restarted"
        if status == "terminating":
            return "the pod was deleted"
        return f"the pod is {status}"

    def sessions(self, pod_id: str | None = None) -> list[Session]:
        return [s for s in self._open.values() if pod_id is None or s.pod_id == pod_id]

    async def sweep(self) -> None:
        """End the sessions idle for ``idle_seconds``, then those whose caller may no longer
        get in the way they did. The idle pass waits on nothing; the access checks run side
        by side, each for at most ``CHECK_SECONDS``, so no check (a store that hangs) holds up
        the others or the next sweep."""
        now = self._clock.now()
        live = [s for s in self._open.values() if s.ended_because is None]
        for session in live:
            if self.idle_seconds > 0 and now - session.last_active >= self.idle_seconds:
                self._end(session, f"idle for {self.idle_seconds:.0f} s (SKIFF_SSH_IDLE_SECONDS)")
        checked = [s for s in live if s.ended_because is None]
        verdicts = await asyncio.gather(*(self._verdict(s) for s in checked))
        for session, why in zip(checked, verdicts, strict=True):
            # (Not one that closed while it was checked: how it ended is told already.)
            if why and self._open.get(session.id) is session:
                self._end(session, why)
        unknown = verdicts.count(None)
        if unknown:
            log.warning("%d open session(s) could not be checked; asked again next sweep", unknown)

    def _end(self, session: Session, why: str) -> None:
        if session.ended_because is None:
            session.ended_because = why
            session.entry.end()

    @staticmethod
    async def _verdict(session: Session) -> str | None:
        """Why the session must end now ("" when its caller may still get in), or None when the
        store could not say in time: it goes on until a sweep that can. Anything else that
        goes wrong is no proof the caller may get in: the session ends."""
        try:
            async with asyncio.timeout(CHECK_SECONDS):
                allowed = await session.still_allowed()
        except Exception as exc:
            if unavailable(exc):
                return None
            log.exception("pod %s: session %d's access check failed", session.pod_id, session.id)
            return "its access could not be checked (the server's log says why)"
        if allowed:
            return ""
        return (
            f"its {session.caller.credential or 'access'} no longer lets "
            f"{session.caller.user.name} in"
        )

    async def run(self) -> None:
        await self._wakeups.repeat(self.sweep, SWEEP_SECONDS, "the idle session sweep", log)

    async def end_all(self) -> None:
        """The server stops: every session's process ends."""
        for session in list(self._open.values()):
            session.ended_because = "the server stopped"
            session.entry.end()

    async def _note(self, pod_id: str, text: str) -> None:
        log.info("pod %s: %s", pod_id, text)
        await self._logs.note(pod_id, f"skiff: {text}", time.time())
