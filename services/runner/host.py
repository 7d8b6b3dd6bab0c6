"""The agent host (``runner.agents = "host"``, the default): one long-lived process per runner runs every slot's agent.

It starts as an isolated rollout's child does (a fresh ``python -m voltbus.services.runner.host_process``,
exec'd, not a fork of the runner: no secret in its memory; no ``VOLTBUS_*`` variable; no bus connection), loads
the agent once and runs each rollout the runner hands it (``Run`` frames on a pipe of its own) as in-process
slots would. Its store requests come back over ``pipe.py``'s frames and are carried out for the attempts it
currently holds only. A rollout's cancellation (the runner's stop, or its timeout passed with no end) reaches it
as a ``Cancel`` frame; a host that dies fails the attempts it held (retried per their config), and the next
rollout starts a new host.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys

import msgspec

from voltbus.schemas.errors import InvalidCommand, VoltbusError
from voltbus.schemas.resources import Resource
from voltbus.schemas.rollouts import ErrorInfo
from voltbus.services.clients.store import AttemptedRollout, Store
from voltbus.services.frames import frame

from .execute import CANCELLED, MissingResources, error_info, resources_for, with_key
from .isolate import as_user, child_environment, exit_reason
from .loader import AgentLoadError
from .pipe import PipeServer, SpanLimits

log = logging.getLogger(__name__)

START_TIMEOUT_S = 120.0
"""How long a new host may take to load the agent (imports of heavy libraries included)."""
GRACE_S = 10.0
"""How long the host has to report a rollout done once its timeout passed, or once it was cancelled."""


class Start(msgspec.Struct, kw_only=True, tag="start", tag_field="op"):
    """The host's first frame: which agent to load and the span sizes the runner's settings allow."""

    agent: str
    limits: SpanLimits


class Run(msgspec.Struct, kw_only=True, tag="run", tag_field="op"):
    """Run one claimed rollout (its resources resolved by the runner; ProxyLLMs carry the agent key)."""

    rollout: AttemptedRollout
    resources: dict[str, Resource]
    key: str | None = None


class Cancel(msgspec.Struct, kw_only=True, tag="cancel", tag_field="op"):
    """Stop a rollout the host runs: its attempt ends failed as ``Cancelled``."""

    rollout_id: str
    attempt_id: str


Job = Start | Run | Cancel


class HostDied(VoltbusError):
    """The agent host process ended, or never became ready, while it held the rollout."""


class _Process:
    """One agent host process: its pipes, the server of its requests, the rollouts it holds."""

    def __init__(self, proc: asyncio.subprocess.Process, server: PipeServer, jobs: asyncio.WriteTransport) -> None:
        self.proc, self.server, self.jobs = proc, server, jobs
        self.pending: dict[str, asyncio.Future[None]] = {}
        self.alive = True
        self.closing = False
        self.serving: asyncio.Task[None] | None = None
        self.watching: asyncio.Task[None] | None = None

    def send(self, job: Job) -> None:
        if self.alive and not self.jobs.is_closing():
            self.jobs.write(frame(msgspec.json.encode(job)))

    def done(self, rollout_id: str, attempt_id: str) -> None:
        fut = self.pending.get(rollout_id)
        held = self.server.assigned.get(rollout_id)
        if fut is not None and not fut.done() and held is not None and held.attempt.attempt_id == attempt_id:
            fut.set_result(None)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def died(self, reason: str) -> None:
        self.alive = False
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(HostDied(reason))
                fut.exception()  # retrieved here: a slot already gone must not make asyncio complain


class AgentHost:
    """The runner's side of its agent host: starts it (again after it died), hands it rollouts, stops it."""

    def __init__(
        self, store: Store | None, agent: str, slots: int, limits: SpanLimits, user: str | None = None
    ) -> None:
        self.store, self.agent, self.slots, self.limits, self.user = store, agent, slots, limits, user
        self.current: _Process | None = None
        self.published: dict[str, float] = {}
        """rollout id -> ``time.monotonic()`` of its last spans stored through the host (the heartbeat's)."""
        self.started = 0
        """Host processes started so far."""
        self._lock = asyncio.Lock()

    def attach(self, store: Store) -> None:
        """The store the host's requests are carried out on (a host may start, and load its agent, before it)."""
        self.store = store
        if self.current is not None:
            self.current.server.store = store

    @property
    def pid(self) -> int | None:
        """The running host's process id."""
        return self.current.proc.pid if self.current is not None and self.current.alive else None

    async def ensure(self) -> _Process:
        """The running host, started now when there is none (AgentLoadError: the agent does not load)."""
        async with self._lock:
            if self.current is None or not self.current.alive:
                self.current = await self._start()
            return self.current

    async def _start(self) -> _Process:
        requests_r, requests_w = os.pipe()
        replies_r, replies_w = os.pipe()
        jobs_r, jobs_w = os.pipe()
        theirs = (requests_w, replies_r, jobs_r)
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "voltbus.services.runner.host_process", *map(str, theirs),
                stdin=asyncio.subprocess.DEVNULL, start_new_session=True,
                env=child_environment(os.environ), pass_fds=theirs, **as_user(self.user),  # type: ignore[arg-type]
            )  # fmt: skip
        except BaseException:
            for fd in (requests_r, replies_w, jobs_w):
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        self.started += 1
        loop = asyncio.get_running_loop()
        room = max(16, 4 * self.slots)
        server = PipeServer(self.store, None, requests_r, replies_w, most_in_flight=room)  # type: ignore[arg-type]
        server.published = self.published
        jobs, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(jobs_w, "wb", buffering=0))
        host = _Process(proc, server, jobs)  # type: ignore[arg-type]
        ready: asyncio.Future[str | None] = loop.create_future()
        server.on_ready = lambda error: None if ready.done() else ready.set_result(error)
        server.on_done = host.done
        host.serving = asyncio.create_task(server.serve())
        exited = asyncio.create_task(proc.wait())
        host.send(Start(agent=self.agent, limits=self.limits))
        await asyncio.wait([ready, exited], timeout=START_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
        if not ready.done() or ready.result() is not None:
            host.kill()
            await exited
            await self._end(host, "")
            if ready.done():
                raise AgentLoadError(str(ready.result()))
            reason = exit_reason(proc.returncode) if proc.returncode is not None else f"no answer in {START_TIMEOUT_S}s"
            raise HostDied(f"the agent host did not start: {reason}")
        host.watching = asyncio.create_task(self._watch(host, exited))
        log.info("agent host started (pid %d): %s", proc.pid, self.agent)
        return host

    async def _watch(self, host: _Process, exited: asyncio.Task[int]) -> None:
        code = await exited
        reason = exit_reason(code).replace("agent process", "agent host")
        if not host.closing:
            log.warning("%s (pid %d); its %d rollout(s) fail", reason, host.proc.pid, len(host.pending))
        await self._end(host, reason)

    async def _end(self, host: _Process, reason: str) -> None:
        host.died(reason)
        host.kill()  # what the host started dies with it
        host.jobs.close()
        if host.serving is not None:
            host.serving.cancel()
            await asyncio.gather(host.serving, return_exceptions=True)

    async def run(self, rollout: AttemptedRollout, key: str | None) -> None:
        """Run one claimed rollout in the host; a host that dies (or cannot start) fails its attempt."""
        rid, aid, worker = rollout.rollout_id, rollout.attempt.attempt_id, rollout.attempt.worker_id
        try:
            assert self.store is not None
            resources = with_key(await resources_for(self.store, rollout), key)
            host = await self.ensure()
        except MissingResources as exc:
            await self._fail(rollout, error_info(exc))
            return
        except (HostDied, AgentLoadError) as exc:
            await self._fail(rollout, ErrorInfo(type="AgentProcessDied", message=str(exc)))
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        host.pending[rid], host.server.assigned[rid] = fut, rollout
        try:
            host.send(Run(rollout=rollout, resources=resources, key=key))
            await self._wait(host, rollout, fut)
        except HostDied as exc:
            log.warning("rollout_id=%s attempt_id=%s (worker %s): %s", rid, aid, worker, exc)
            await self._fail(rollout, ErrorInfo(type="AgentProcessDied", message=str(exc)))
        except asyncio.CancelledError:  # the runner stops: the host ends the attempt, else the runner does
            host.send(Cancel(rollout_id=rid, attempt_id=aid))
            with contextlib.suppress(TimeoutError, HostDied):
                await asyncio.wait_for(asyncio.shield(fut), GRACE_S)
            if not fut.done() or fut.exception() is not None:
                await self._fail(rollout, CANCELLED)
            raise
        finally:
            host.pending.pop(rid, None)
            host.server.release(rid)
            self.published.pop(rid, None)

    async def _wait(self, host: _Process, rollout: AttemptedRollout, fut: asyncio.Future[None]) -> None:
        """Until the host is done with the rollout. The host ends it at its timeout itself; one that has not,
        ``GRACE_S`` later, gets a ``Cancel``, and one that does not answer that either is killed (its event loop
        is blocked: none of its rollouts would end) and the attempt expires as ``timeout``."""
        limit = rollout.config.timeout_seconds
        try:
            await asyncio.wait_for(asyncio.shield(fut), None if limit is None else limit + GRACE_S)
            return
        except TimeoutError:
            pass
        rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
        log.warning("rollout_id=%s attempt_id=%s: still running %ss past its timeout; cancelling it", rid, aid, GRACE_S)
        host.send(Cancel(rollout_id=rid, attempt_id=aid))
        try:
            await asyncio.wait_for(asyncio.shield(fut), GRACE_S)
            return
        except TimeoutError:
            log.error("the agent host (pid %d) does not answer a cancel: killing it", host.proc.pid)
        host.kill()
        with contextlib.suppress(InvalidCommand):
            await self.store.expire_attempt(rid, aid, "timeout")  # type: ignore[union-attr]

    async def _fail(self, rollout: AttemptedRollout, error: ErrorInfo) -> None:
        rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
        with contextlib.suppress(InvalidCommand):  # the host may have ended it before it died
            await self.store.finish_attempt(  # type: ignore[union-attr]
                rid, aid, error, worker_id=rollout.attempt.worker_id
            )

    async def close(self, wait_s: float = 5.0) -> None:
        """Stop the host: its jobs pipe closes (it cancels what it still runs and exits), killed after ``wait_s``."""
        host, self.current = self.current, None
        if host is None:
            return
        host.closing = True
        host.jobs.close()
        if host.watching is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(host.watching), wait_s)
            host.kill()
            await host.watching
