"""Running one claimed rollout: resources, hooks, the agent inside its tracing context, the result,
and the attempt's end (succeeded, or failed with the error recorded)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
import traceback
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import msgspec

from voltbus.schemas.errors import InvalidCommand, VoltbusError
from voltbus.schemas.resources import ProxyLLM
from voltbus.schemas.rollouts import ErrorInfo
from voltbus.services.clients.agent.litagent import LitAgent
from voltbus.services.clients.agent.otel import LogTracer
from voltbus.services.clients.store import AttemptedRollout, Store
from voltbus.services.keys import NO_KEY

from .results import record_result

log = logging.getLogger(__name__)
T = TypeVar("T")


class MissingResources(VoltbusError):
    """The rollout pins a resources version the log does not have."""


CANCELLED = ErrorInfo(type="Cancelled", message="the runner stopped during the rollout")
"""The error of an attempt still running when its runner stopped (past ``shutdown_grace_s``)."""


async def resources_for(store: Store, rollout: AttemptedRollout) -> dict[str, Any]:
    """The rollout's pinned resources, or the latest when it names none (none at all when none was published:
    Agent Lightning 1.0 agents use none); MissingResources if the pinned version is absent."""
    if not rollout.resources_id:
        latest = await store.get_latest_resources()
        return latest.resources if latest is not None else {}
    found = await store.get_resources_by_id(rollout.resources_id)
    if found is None:
        raise MissingResources(f"rollout {rollout.rollout_id}: resources {rollout.resources_id} not found")
    return found.resources


def with_key(resources: dict[str, Any], key: str | None) -> dict[str, Any]:
    """The resources with every ProxyLLM (the gateway) carrying the attempt's agent key; with none required, a
    ProxyLLM without an ``api_key`` gets ``NO_KEY`` (the openai client refuses none).

    >>> from voltbus.schemas.resources import LLM
    >>> both = {"p": ProxyLLM(endpoint="http://gw/v1", model="m"), "l": LLM(endpoint="http://x", model="m")}
    >>> out = with_key(both, "k")
    >>> out["p"].api_key, out["l"].api_key
    ('k', None)
    >>> own = {"p": ProxyLLM(endpoint="http://gw/v1", model="m", api_key="own")}
    >>> with_key(both, None)["p"].api_key, with_key(own, None)["p"].api_key
    ('voltbus-no-key', 'own')
    """
    if key is None:
        return {
            n: msgspec.structs.replace(r, api_key=NO_KEY) if isinstance(r, ProxyLLM) and r.api_key is None else r
            for n, r in resources.items()
        }
    return {n: msgspec.structs.replace(r, api_key=key) if isinstance(r, ProxyLLM) else r for n, r in resources.items()}


async def call_agent(agent: LitAgent[Any], rollout: AttemptedRollout, resources: dict[str, Any]) -> Any:
    """Run the agent on the task: async agents on the loop, sync ones in a worker thread (so heartbeats
    and other slots keep running); both inherit the attempt's tracing context."""
    train = rollout.mode == "train"
    if agent.is_async():
        method = agent.training_rollout_async if train else agent.validation_rollout_async
        return await method(rollout.input, resources=resources, rollout=rollout)
    method = agent.training_rollout if train else agent.validation_rollout
    return await in_thread(lambda: method(rollout.input, resources=resources, rollout=rollout))


async def in_thread(work: Callable[[], T]) -> T:
    """``work()`` in a daemon thread of its own, in the caller's context (as ``asyncio.to_thread``, but a
    sync agent stuck in blocking code, timed out or cancelled, neither holds the process at exit, where the
    default executor's threads are joined, nor keeps one of that executor's few threads, cores + 4, that
    later rollouts and the runner's own work queue behind)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()

    def settle(result: Any, error: BaseException | None) -> None:
        if done.done():  # the awaiting rollout was cancelled meanwhile
            return
        if error is None:
            done.set_result(result)
        else:
            done.set_exception(error)

    def run() -> None:
        result, error = None, None
        try:
            result = context.run(work)
        except BaseException as exc:
            error = exc
            # SystemExit and the like must fail the attempt, not end the slot; a future refuses StopIteration
            if isinstance(exc, StopIteration) or not isinstance(exc, Exception):
                error = RuntimeError(f"the agent raised {type(exc).__name__}" + (f": {exc}" if str(exc) else ""))
                error.__cause__ = exc
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name="voltbus-agent", daemon=True).start()
    return await done


async def fire(hooks: Sequence[Any], name: str, **kwargs: Any) -> None:
    """Call a hook on every hook object; a failing hook is logged, never fails the rollout."""
    for hook in hooks:
        method = getattr(hook, name, None)
        if method is None:
            continue
        try:
            result = method(**kwargs)
            if asyncio.iscoroutine(result):
                await result
        except Exception:
            log.exception("hook %s.%s failed", type(hook).__name__, name)


def error_info(exc: BaseException) -> ErrorInfo:
    """An exception as the attempt's recorded error."""
    trace = "".join(traceback.format_exception(exc))[-8000:]
    return ErrorInfo(type=type(exc).__name__, message=str(exc)[:2000] or type(exc).__name__, traceback=trace)


async def run_rollout(
    store: Store,
    tracer: LogTracer,
    agent: LitAgent[Any],
    rollout: AttemptedRollout,
    hooks: Sequence[Any] = (),
    runner: Any = None,
    raise_errors: bool = False,
    key: str | None = None,
    resources: dict[str, Any] | None = None,
) -> ErrorInfo | None:
    """Run one attempt end to end and end it; return the recorded error, if any. ``key`` is the agent key
    its ProxyLLM resources carry (the rollout's own, with per-rollout keys); ``resources``, when given,
    are used instead of reading the rollout's from the store (an isolated child gets them resolved)."""
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    error: ErrorInfo | None = None
    spans: list[Any] = []
    raised: BaseException | None = None
    timed_out = False
    limit: asyncio.Timeout | None = None
    try:
        resources = with_key(resources if resources is not None else await resources_for(store, rollout), key)
        if rollout.attempt.status != "running":  # the runner's own claims open running already
            await store.update_attempt(rid, aid, status="running")
        await fire(hooks, "on_rollout_start", agent=agent, runner=runner, rollout=rollout)
        with tracer.attempt(rid, aid):
            await fire(hooks, "on_trace_start", agent=agent, runner=runner, tracer=tracer, rollout=rollout)
            async with asyncio.timeout(rollout.config.timeout_seconds) as limit:  # None: no limit
                result = await call_agent(agent, rollout, resources)
            if hooks:  # the agent's spans stored and numbered: the hooks' tracer.get_last_trace() has them all
                with contextlib.suppress(Exception):  # refused: retried, and reported, at the attempt's end
                    await tracer.flush(rid)
            await fire(hooks, "on_trace_end", agent=agent, runner=runner, tracer=tracer, rollout=rollout)
            spans = await record_result(store, rollout, result, tracer.trace_of(rid, aid))
    except asyncio.CancelledError as exc:
        error, raised = CANCELLED, exc
    except Exception as exc:
        if isinstance(exc, TimeoutError) and limit is not None and limit.expired():
            # the agent ran past timeout_seconds (a sync agent's thread cannot be stopped: use --isolate)
            timed_out, raised = True, exc
            log.warning("rollout_id=%s attempt_id=%s: timed out after %ss", rid, aid, rollout.config.timeout_seconds)
        else:
            log.warning("rollout_id=%s attempt_id=%s failed: %s: %s", rid, aid, type(exc).__name__, exc)
            error, raised = error_info(exc), exc
    finally:
        await fire(hooks, "on_rollout_end", agent=agent, runner=runner, rollout=rollout, spans=spans)
        tracer.forget(rid, aid)
        if timed_out:
            await store.expire_attempt(rid, aid, "timeout")  # the retry policy decides, as for the coordinator
            error = ErrorInfo(type="Timeout", message=f"the agent ran past {rollout.config.timeout_seconds}s")
        else:
            error = await _finish(store, tracer, rollout, error)
    if raised is not None and (raise_errors or isinstance(raised, asyncio.CancelledError)):
        raise raised
    return error


async def _finish(
    store: Store, tracer: LogTracer, rollout: AttemptedRollout, error: ErrorInfo | None
) -> ErrorInfo | None:
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    try:
        await tracer.flush(rid)
    except Exception as exc:  # never dropped silently: the attempt fails and says why
        error = error or ErrorInfo(
            type="SpansNotPublished", message=f"spans of this attempt could not be stored: {exc}"
        )
    try:
        await store.finish_attempt(rid, aid, error, worker_id=rollout.attempt.worker_id)
    except InvalidCommand as exc:  # it already ended: timed out, cancelled or expired by the coordinator
        log.warning("rollout_id=%s attempt_id=%s: result not recorded (%s)", rid, aid, exc)
    return error
