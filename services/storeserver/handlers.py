"""The store routes (``/v1/agl/...``): each decodes its request, calls the store client's method of the same name
and answers the record in Agent Lightning's shape. Errors are answered in ``errors.answer``, the one boundary."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from voltbus.services.clients.store import EnqueueRolloutRequest, NamedResources, Store

from . import wire
from .body import read_json, read_query
from .errors import HttpError, answer

Handler = Callable[[Request, Store], Awaitable[Any]]
_encode = msgspec.json.Encoder().encode


def endpoint(status: int = 200) -> Callable[[Handler], Callable[[Request], Awaitable[Response]]]:
    """A handler returning a record, as a route answering it as JSON with ``status``; errors as ``errors.answer``."""

    def wrap(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        @functools.wraps(handler)
        async def route(request: Request) -> Response:
            try:
                value = await handler(request, request.app.state.store)
            except Exception as exc:  # the one boundary: every error becomes its status here
                return answer(exc)
            return Response(_encode(wire.record_out(value)), status_code=status, media_type="application/json")

        return route

    return wrap


def _limit(request: Request) -> int:
    return request.app.state.settings.max_body_bytes


async def _json(request: Request, kind: type[Any], optional: bool = False) -> Any:
    return await read_json(request, _limit(request), kind, optional)


def _page(query: wire.Page) -> dict[str, Any]:
    """The page arguments of a query (``limit`` 0 is refused, as by Agent Lightning)."""
    if query.limit == 0:
        raise HttpError(400, "invalid_request", "limit must be greater than 0, or -1 for no limit")
    return {"sort_by": query.sort_by, "sort_order": query.sort_order, "limit": query.limit, "offset": query.offset}


@endpoint()
async def health(request: Request, store: Store) -> Any:
    """Always ``{"status": "ok"}`` (no token needed)."""
    return {"status": "ok"}


@endpoint(201)
async def enqueue_rollouts(request: Request, store: Store) -> Any:
    """Queue the rollouts, in order."""
    body: wire.EnqueueMany = await _json(request, wire.EnqueueMany)
    wanted = [EnqueueRolloutRequest(**msgspec.structs.asdict(r)) for r in body.rollouts]
    return await store.enqueue_many_rollouts(wanted) if wanted else []


@endpoint()
async def dequeue_rollouts(request: Request, store: Store) -> Any:
    """Claim up to ``limit`` queued rollouts for ``worker_id``."""
    body: wire.Dequeue = await _json(request, wire.Dequeue, optional=True)
    if body.limit <= 0:
        return []
    async with request.app.state.dequeue_lock:  # one consumer subscription: one fetch at a time
        return await store.dequeue_many_rollouts(limit=body.limit, worker_id=body.worker_id)


@endpoint(201)
async def start_rollout(request: Request, store: Store) -> Any:
    """A rollout with its first attempt, bypassing the queue."""
    b: wire.StartRollout = await _json(request, wire.StartRollout)
    return await store.start_rollout(b.input, b.mode, b.resources_id, b.config, b.metadata, b.worker_id)


async def _rollouts(store: Store, q: wire.QueryRollouts) -> Any:
    filters = {"status_in": q.status_in, "rollout_id_in": q.rollout_id_in, "rollout_id_contains": q.rollout_id_contains}
    return await store.query_rollouts(**filters, filter_logic=q.filter_logic, **_page(q))


@endpoint()
async def query_rollouts(request: Request, store: Store) -> Any:
    """Rollouts matching the query string, one page."""
    return await _rollouts(store, read_query(request, wire.QueryRollouts))


@endpoint()
async def search_rollouts(request: Request, store: Store) -> Any:
    """Rollouts matching the body, one page."""
    return await _rollouts(store, await _json(request, wire.QueryRollouts, optional=True))


@endpoint()
async def get_rollout(request: Request, store: Store) -> Any:
    """The rollout with its latest attempt, or null."""
    return await store.get_rollout_by_id(request.path_params["rollout_id"])


@endpoint()
async def update_rollout(request: Request, store: Store) -> Any:
    """Change the fields sent."""
    b: wire.UpdateRollout = await _json(request, wire.UpdateRollout)
    fields = {k: v for k, v in msgspec.structs.asdict(b).items() if v is not msgspec.UNSET}
    return await store.update_rollout(request.path_params["rollout_id"], **fields)


@endpoint(201)
async def start_attempt(request: Request, store: Store) -> Any:
    """Open the rollout's next attempt."""
    body: wire.WorkerBody = await _json(request, wire.WorkerBody, optional=True)
    return await store.start_attempt(request.path_params["rollout_id"], worker_id=body.worker_id)


async def _attempts(request: Request, store: Store, q: wire.QueryAttempts) -> Any:
    page = _page(q) | {"sort_by": q.sort_by or "sequence_id"}
    return await store.query_attempts(request.path_params["rollout_id"], **page)


@endpoint()
async def query_attempts(request: Request, store: Store) -> Any:
    """The rollout's attempts (query string), one page."""
    return await _attempts(request, store, read_query(request, wire.QueryAttempts))


@endpoint()
async def search_attempts(request: Request, store: Store) -> Any:
    """The rollout's attempts (body), one page."""
    return await _attempts(request, store, await _json(request, wire.QueryAttempts, optional=True))


@endpoint()
async def latest_attempt(request: Request, store: Store) -> Any:
    """The rollout's latest attempt, or null."""
    return await store.get_latest_attempt(request.path_params["rollout_id"])


@endpoint()
async def update_attempt(request: Request, store: Store) -> Any:
    """Change the attempt's fields sent (its status through the lifecycle)."""
    b: wire.UpdateAttempt = await _json(request, wire.UpdateAttempt)
    fields = {k: v for k, v in msgspec.structs.asdict(b).items() if v is not msgspec.UNSET}
    params = request.path_params
    return await store.update_attempt(params["rollout_id"], params["attempt_id"], **fields)


async def _workers(store: Store, q: wire.QueryWorkers) -> Any:
    filters = {"status_in": q.status_in, "worker_id_contains": q.worker_id_contains}
    return await store.query_workers(**filters, filter_logic=q.filter_logic, **_page(q))


@endpoint()
async def query_workers(request: Request, store: Store) -> Any:
    """Workers matching the query string, one page."""
    return await _workers(store, read_query(request, wire.QueryWorkers))


@endpoint()
async def search_workers(request: Request, store: Store) -> Any:
    """Workers matching the body, one page."""
    return await _workers(store, await _json(request, wire.QueryWorkers, optional=True))


@endpoint()
async def get_worker(request: Request, store: Store) -> Any:
    """The worker, or null."""
    return await store.get_worker_by_id(request.path_params["worker_id"])


@endpoint()
async def update_worker(request: Request, store: Store) -> Any:
    """Record a heartbeat of the worker."""
    body: wire.UpdateWorker = await _json(request, wire.UpdateWorker, optional=True)
    return await store.update_worker(request.path_params["worker_id"], heartbeat_stats=body.heartbeat_stats)


@endpoint()
async def statistics(request: Request, store: Store) -> Any:
    """Counts of what the log and the projection hold."""
    return await store.statistics()


@endpoint()
async def query_resources(request: Request, store: Store) -> Any:
    """Resources bundles matching the query string, one page."""
    q = read_query(request, wire.QueryResources)
    return await store.query_resources(
        resources_id=q.resources_id, resources_id_contains=q.resources_id_contains, **_page(q)
    )


@endpoint(201)
async def add_resources(request: Request, store: Store) -> Any:
    """Publish a new bundle."""
    return await store.add_resources(await _json(request, NamedResources))


@endpoint()
async def latest_resources(request: Request, store: Store) -> Any:
    """The newest resources version, or null."""
    return await store.get_latest_resources()


@endpoint()
async def update_resources(request: Request, store: Store) -> Any:
    """Publish the next version of a bundle."""
    return await store.update_resources(request.path_params["resources_id"], await _json(request, NamedResources))


@endpoint()
async def get_resources(request: Request, store: Store) -> Any:
    """A bundle (or a pinned version), or null."""
    return await store.get_resources_by_id(request.path_params["resources_id"])


@endpoint(201)
async def add_span(request: Request, store: Store) -> Any:
    """Record one span sent in Agent Lightning's shape."""
    return await store.add_span(wire.span_in(await _json(request, wire.AlSpan)))


async def _spans(store: Store, q: wire.QuerySpans) -> Any:
    filters = {k: getattr(q, k) for k in ("trace_id", "span_id", "parent_id", "name")}
    filters |= {f"{k}_contains": getattr(q, f"{k}_contains") for k in ("trace_id", "span_id", "parent_id", "name")}
    page = _page(q) | {"sort_by": q.sort_by or "sequence_id"}
    return await store.query_spans(q.rollout_id, q.attempt_id, **filters, filter_logic=q.filter_logic, **page)


@endpoint()
async def query_spans(request: Request, store: Store) -> Any:
    """The rollout's spans matching the query string, one page."""
    return await _spans(store, read_query(request, wire.QuerySpans))


@endpoint()
async def search_spans(request: Request, store: Store) -> Any:
    """The rollout's spans matching the body, one page."""
    return await _spans(store, await _json(request, wire.QuerySpans))


@endpoint()
async def next_sequence_id(request: Request, store: Store) -> Any:
    """The rollout's next span sequence id."""
    body: wire.NextSequence = await _json(request, wire.NextSequence)
    if await store.get_rollout_by_id(body.rollout_id) is None:  # no counter for a rollout that does not exist
        raise HttpError(404, "not_found", f"unknown rollout {body.rollout_id!r}")
    return {"sequence_id": await store.get_next_span_sequence_id(body.rollout_id, body.attempt_id)}


@endpoint()
async def wait_for_rollouts(request: Request, store: Store) -> Any:
    """The rollouts finished, or finishing within the timeout (at most ``max_wait_s``)."""
    body: wire.WaitRollouts = await _json(request, wire.WaitRollouts)
    longest = request.app.state.settings.max_wait_s
    timeout = longest if body.timeout is None else min(body.timeout, longest)
    return await store.wait_for_rollouts(rollout_ids=body.rollout_ids, timeout=timeout)
