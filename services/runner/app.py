"""The runner: N slots claim rollouts and run the agent on them; heartbeats from a thread; graceful stop.

Where the agent runs is ``runner.agents``: in the agent host (default, ``host.py``), one process per rollout
(``isolate``) or in this process (``in-process``, for trusted agents: it holds the bus credentials).
``Runner.step(task)`` runs one task directly (no queue), raising the agent's error, for debugging.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Sequence
from typing import Any

import nats.errors

from voltbus.schemas.errors import InvalidCommand, VoltbusError
from voltbus.schemas.rollouts import ErrorInfo
from voltbus.services.clients.agent.global_spans import route_global_spans
from voltbus.services.clients.agent.instrument import instrument_openai, uninstrument_openai
from voltbus.services.clients.agent.litagent import LitAgent
from voltbus.services.clients.agent.otel import LogTracer
from voltbus.services.clients.store import AttemptedRollout, Rollout, Store, connect
from voltbus.services.clients.telemetry.tracing import clear_active_tracer, set_active_tracer
from voltbus.services.keys import agent_key_for
from voltbus.services.restart import stop_if_cancelled
from voltbus.services.settings import RunnerSettings, Settings

from .dispatch import Dispatcher
from .execute import run_rollout
from .heartbeat import Heartbeat
from .host import AgentHost
from .isolate import agl_environment, run_isolated
from .keys import load_holder
from .loader import load_agent
from .pipe import SpanLimits
from .session import open_sessions

log = logging.getLogger(__name__)

WORKER_NUMBERS = "_workers"
"""The bus counter that hands each runner its slots' worker numbers (rollout ids never start with ``_``)."""
SHARED_CREDENTIALS = "agents run in-process: they share this runner's bus credentials (runner.agents = 'in-process'"
"""The start of the warning an opted-in in-process runner logs."""


ENV_MAP_NEEDS_ISOLATION = ErrorInfo(
    type="EnvMapError",
    message="the rollout's config.env_map sets environment variables per rollout: only an isolated runner "
    "(voltbus runner --isolate) can run it",
)
"""The error of a rollout with an ``env_map`` claimed by a runner that is not isolated."""


class AgentFailed(VoltbusError):
    """``Runner.step``: the agent, run in another process, failed its attempt."""


def agent_mode(cfg: RunnerSettings, agent: str | LitAgent[Any], hooks: Sequence[Any] = ()) -> str:
    """Where the runner runs its agent: ``cfg.mode``, except that an agent object or hooks (objects of this
    process, which the agent host cannot load) run in-process unless isolation was asked for.

    >>> agent_mode(RunnerSettings(), "m:a"), agent_mode(RunnerSettings(), "m:a", [object()])
    ('host', 'in-process')
    """
    if cfg.env_map and cfg.mode != "isolate":
        raise InvalidCommand("runner.env_map sets variables per rollout: it needs isolated agents (--isolate)")
    if isinstance(agent, str) and not hooks:
        return cfg.mode
    if cfg.mode == "isolate":
        raise ValueError("--isolate needs the agent as an import path ('module:attr') and no hooks")
    return "in-process"


class Runner:
    """One runner process: its store connection, tracer, heartbeat thread and slots."""

    def __init__(self, settings: Settings, agent: str | LitAgent[Any], hooks: Sequence[Any] = ()) -> None:
        self.settings = settings
        cfg = settings.runner
        self.mode = agent_mode(cfg, agent, hooks)
        self.agent_path = agent if isinstance(agent, str) else None
        self.agent: LitAgent[Any] | None = None
        """The agent, in-process only: the other modes never import its code here."""
        if self.mode == "in-process":
            self.agent = load_agent(agent) if isinstance(agent, str) else agent
        self.hooks = list(hooks)
        self.worker_ids = [f"{cfg.worker_prefix}-{i}" for i in range(cfg.slots)]
        self.store: Store | None = None
        self.tracer: LogTracer | None = None
        self.heartbeat: Heartbeat | None = None
        self.dispatcher: Dispatcher | None = None
        self.host: AgentHost | None = None
        """The agent host (``host`` mode; ``isolate`` starts one only to check that the agent loads)."""
        self.spans_stored: dict[str, float] = {}
        """rollout id -> ``time.monotonic()`` of its last stored spans (the heartbeat's sign of life)."""
        self.finished = 0
        self._busy_reports: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> Runner:
        cfg = self.settings.runner
        try:
            if self.agent is None:  # the agent loads in a host process (before the bus), or this runner does not start
                assert self.agent_path is not None
                nats = self.settings.nats
                limits = SpanLimits(span_value_max_bytes=nats.span_value_max_bytes, span_max_bytes=nats.span_max_bytes)
                self.host = AgentHost(None, self.agent_path, cfg.slots, limits, cfg.agent_user)
                await self.host.ensure()
                if self.mode == "isolate":
                    await self.host.close()
                self.spans_stored = self.host.published
            nats = self.settings.nats.model_copy(update={"dequeue_wait_s": cfg.claim_wait_s})
            self.store = await connect(settings=nats, name="voltbus-runner")
            self.store.runner_group = cfg.group
            if self.host is not None:
                self.host.attach(self.store)
            await self._open(self.store)
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def _open(self, store: Store) -> None:
        cfg = self.settings.runner
        if "worker_prefix" not in cfg.model_fields_set:  # Worker-<n>, numbered across every runner of the bus
            last = await store.log.next_sequence(WORKER_NUMBERS, cfg.slots)
            self.worker_ids = [f"{cfg.worker_prefix}-{n}" for n in range(last - cfg.slots, last)]
        else:  # fixed ids: the key of the previous process with them, so it may end what that one left running
            store.sign_as(load_holder(cfg.key_dir / store.topology.namespace / f"{cfg.worker_prefix}.key"))
        await open_sessions(store, self.worker_ids)  # before any claim: settle what a previous process left
        self.dispatcher = Dispatcher(store, report_claims=cfg.busy_report_s == 0)
        if self.agent is not None:
            if cfg.mode == "in-process":
                log.warning("%s: for trusted agents only)", SHARED_CREDENTIALS)
            else:  # Trainer.fit, a library caller: the agent is already code of this process
                log.info("the agent is an object of this process (or hooks were given): it runs in-process")
            self.tracer = LogTracer(store)
            set_active_tracer(self.tracer)
            instrument_openai(self.tracer)
            route_global_spans()
            self.agent.set_runner(self)
            self.spans_stored = self.tracer.published
        self.heartbeat = Heartbeat(self.settings.nats, self.worker_ids, cfg.heartbeat_s)
        self.heartbeat.main = (asyncio.get_running_loop(), store)
        self.heartbeat.spans_stored = self.spans_stored
        self.heartbeat.start()

    async def __aexit__(self, *_: object) -> None:
        for task in list(self._busy_reports):
            task.cancel()
        await asyncio.gather(*self._busy_reports, return_exceptions=True)
        if self.heartbeat:
            await asyncio.to_thread(self.heartbeat.stop)
        if self.host:
            await self.host.close()
        if self.tracer:
            uninstrument_openai()
            clear_active_tracer()
            self.tracer.shutdown()
        if self.store:
            await self.store.close()

    async def run_one(self, rollout: AttemptedRollout, worker_id: str, raise_errors: bool = False) -> None:
        """Run one claimed rollout in the agent host, in a process of its own, or in this process."""
        assert self.store is not None and self.heartbeat is not None
        self.heartbeat.active[worker_id] = (rollout.rollout_id, rollout.attempt.attempt_id)
        key = agent_key_for(self.settings.gateway, rollout.rollout_id)
        delay = self.settings.runner.busy_report_s  # 0: the claim reported it busy already
        loop = asyncio.get_running_loop()
        busy = loop.call_later(delay, self._report_busy, worker_id, rollout.rollout_id) if delay else None
        began = time.monotonic()
        try:
            if rollout.config.env_map and self.mode != "isolate":  # its variables need a process of its own
                await self.store.finish_attempt(
                    rollout.rollout_id, rollout.attempt.attempt_id, ENV_MAP_NEEDS_ISOLATION, worker_id=worker_id
                )
            elif self.mode == "host":
                assert self.host is not None
                await self.host.run(rollout, key)
            elif self.mode == "isolate":
                assert self.agent_path is not None
                gateway = self.settings.runner.gateway_url
                env = agl_environment(gateway, rollout, key) if gateway else None
                user = self.settings.runner.agent_user
                env_map = self.settings.runner.env_map
                await run_isolated(self.store, self.agent_path, rollout, env, key, self.spans_stored, user, env_map)
            else:
                assert self.agent is not None and self.tracer is not None
                agent, hooks = self.agent, self.hooks
                await run_rollout(self.store, self.tracer, agent, rollout, hooks, self, raise_errors, key)
        finally:
            if busy is not None:
                busy.cancel()
            self.heartbeat.active.pop(worker_id, None)
            self.spans_stored.pop(rollout.rollout_id, None)
            self.finished += 1
            outcome = self.store.attempt_outcome(rollout.rollout_id) or "ended"
            log.info(
                "rollout_id=%s attempt=%d worker=%s: %s in %.2fs",
                rollout.rollout_id, rollout.attempt.sequence_id, worker_id, outcome, time.monotonic() - began,
            )  # fmt: skip

    def _report_busy(self, worker_id: str, rollout_id: str) -> None:
        """Report the slot's worker busy: its attempt has run ``busy_report_s``."""
        if self.store is None:
            return
        task = asyncio.create_task(self._busy(self.store, worker_id, rollout_id))
        self._busy_reports.add(task)
        task.add_done_callback(self._busy_reports.discard)

    @staticmethod
    async def _busy(store: Store, worker_id: str, rollout_id: str) -> None:
        try:
            await store.report_worker_busy(worker_id, rollout_id)
        except (VoltbusError, TimeoutError, nats.errors.Error) as exc:  # not worth failing the rollout over
            log.warning("worker %s: busy status not reported: %s", worker_id, exc)

    async def slot(self, worker_id: str, stop: asyncio.Event, max_rollouts: int | None = None) -> None:
        """Claim and run rollouts until ``stop`` (or ``max_rollouts`` claimed by this slot)."""
        assert self.dispatcher is not None
        done = 0
        while not stop.is_set() and (max_rollouts is None or done < max_rollouts):
            rollout = await self.dispatcher.claim(worker_id)
            if rollout is not None:
                await self.run_one(rollout, worker_id)
                done += 1

    async def flush_spans(self, every: float = 0.2) -> None:
        """Publish spans while agents run, so a runner that dies keeps what its attempts already did. Spans the bus
        refuses are tried again later (the tracer pauses each such rollout, up to 5 s); one warning when refusals
        begin, one when they end."""
        assert self.tracer is not None
        failing = False
        while True:
            try:
                await self.tracer.flush()
                if failing:
                    log.info("span flushes go through again")
                failing = False
            except Exception as exc:  # keep flushing: the spans stay queued and are retried
                stop_if_cancelled()
                if not failing:
                    log.warning("span flush failed (the refused spans are retried): %s", exc)
                failing = True
            await asyncio.sleep(every)  # the flush period, not synchronization

    async def run(self, stop: asyncio.Event, max_rollouts: int | None = None) -> None:
        """Run every slot until ``stop``; running rollouts get ``shutdown_grace_s`` to finish, then end failed."""
        assert self.dispatcher is not None
        flusher = asyncio.create_task(self.flush_spans() if self.tracer else asyncio.sleep(0))
        halt = asyncio.Event()  # stop, or every slot is done
        relay = asyncio.create_task(_relay(stop, halt))
        dispatching = asyncio.create_task(self.dispatcher.run(halt))
        try:
            await self._run_slots(stop, max_rollouts)
        finally:
            halt.set()
            for task in (flusher, relay):
                task.cancel()
            await asyncio.gather(flusher, relay, dispatching, return_exceptions=True)

    async def _run_slots(self, stop: asyncio.Event, max_rollouts: int | None) -> None:
        slots = [asyncio.create_task(self.slot(w, stop, max_rollouts)) for w in self.worker_ids]
        done, _ = await asyncio.wait([asyncio.create_task(stop.wait()), *slots], return_when=asyncio.FIRST_COMPLETED)
        if not stop.is_set() and all(s.done() for s in slots):
            return
        _, late = await asyncio.wait(slots, timeout=self.settings.runner.shutdown_grace_s)
        for task in late:  # their attempts end failed ("the runner stopped during the rollout")
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)

    async def step(self, task: Any, resources: dict[str, Any] | None = None, mode: str | None = None) -> Rollout:
        """Run one task now, bypassing the queue; the agent's exception propagates (after the attempt failed)."""
        assert self.store is not None
        resources_id = None
        if resources is not None:
            update = await self.store.add_resources(resources)
            resources_id = f"{update.resources_id}:{update.version}"
        started = await self.store.start_rollout(
            task, mode=mode, resources_id=resources_id, worker_id=self.worker_ids[0]
        )
        await self.run_one(started, self.worker_ids[0], raise_errors=True)
        final = await self.store.get_rollout_by_id(started.rollout_id)
        assert final is not None
        if self.mode != "in-process" and final.status == "failed":
            error = getattr(getattr(final, "attempt", None), "error", None) or {}
            said = f"{error.get('type')}: {error.get('message')}" if error else "see its attempt"
            raise AgentFailed(f"rollout {final.rollout_id} failed in the agent's process: {said}")
        return final


async def serve(settings: Settings, agent: str, stop: asyncio.Event | None = None) -> None:
    """``voltbus runner``: run until ``stop`` (SIGTERM / Ctrl-C in the CLI)."""
    stop = stop or asyncio.Event()
    async with Runner(settings, agent) as runner:
        where = {"host": "agent host", "isolate": "isolated"}.get(runner.mode, runner.mode)
        log.info("runner with %d slot(s) (%s) running %s", len(runner.worker_ids), where, agent)
        await runner.run(stop)


async def serve_until_signal(settings: Settings, agent: str) -> None:
    """``serve`` until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await serve(settings, agent, stop)


async def _relay(source: asyncio.Event, target: asyncio.Event) -> None:
    await source.wait()
    target.set()
