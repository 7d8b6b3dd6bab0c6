"""Store queries (Agent Lightning's ``query_*``): SQL on the projection, through the running projector.

Every query first waits until the projector has applied everything this client wrote, so a caller
sees its own writes; past ``NatsSettings.query_timeout_s`` it fails with ProjectorUnavailable.
Filters combine with ``filter_logic`` "and" / "or"; with "or" and no filter every row matches
(Agent Lightning returns nothing there, a quirk voltbus does not copy). docs/store-queries.md.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import msgspec

from voltbus.projections.blocks import SQL_DIR, parse
from voltbus.projections.ipc import from_ipc
from voltbus.schemas.errors import InvalidCommand, VoltbusError
from voltbus.schemas.resources import Resource
from voltbus.schemas.spans import SpanEventInfo, SpanStatus
from voltbus.schemas.workers import HeartbeatStats
from voltbus.services.lifecycle import RolloutState
from voltbus.services.lifecycle.state import TERMINAL_ROLLOUT

from .base import StoreBase
from .finished import NEAR_SPANS
from .types import Attempt, PaginatedResult, ResourcesUpdate, Rollout, Span, Worker
from .views import rollout_view

_QUERIES = {b.name: b.sql for b in parse((SQL_DIR / "queries" / "store.sql").read_text(), "store.sql")}
_state = msgspec.json.Decoder(RolloutState)
_resources = msgspec.json.Decoder(dict[str, Resource])

SORTABLE = {  # the scalar fields of each record (Agent Lightning's names), plus attempt_count and seq
    "query_rollouts": ("rollout_id", "status", "mode", "resources_id", "start_time", "end_time", "attempt_count"),
    "query_attempts": (
        "rollout_id",
        "attempt_id",
        "sequence_id",
        "status",
        "worker_id",
        "start_time",
        "end_time",
        "last_heartbeat_time",
    ),
    "query_spans": (
        "rollout_id",
        "attempt_id",
        "sequence_id",
        "trace_id",
        "span_id",
        "parent_id",
        "name",
        "start_time",
        "end_time",
        "seq",
    ),
    "query_resources": ("resources_id", "version", "create_time", "update_time"),
    "query_workers": (
        "worker_id",
        "status",
        "last_heartbeat_time",
        "last_dequeue_time",
        "last_busy_time",
        "last_idle_time",
        "current_rollout_id",
        "current_attempt_id",
    ),
}
DEFAULT_ORDER = {
    "query_rollouts": "start_time",
    "query_attempts": "sequence_id",
    "query_spans": "sequence_id",
    "query_resources": "create_time",
    "query_workers": "worker_id",
}
TIEBREAK = {
    "query_rollouts": "rollout_id",
    "query_attempts": "attempt_id",
    "query_spans": "seq, seq_index",
    "query_resources": "resources_id",
    "query_workers": "worker_id",
}


class ProjectorUnavailable(VoltbusError):
    """The projector that serves queries did not answer, or had not applied this client's writes in time."""


def order_clause(query: str, sort_by: str | None, sort_order: str) -> str:
    """A whitelisted ORDER BY body (identifiers cannot be bound as parameters).

    >>> order_clause("query_rollouts", "end_time", "desc")
    'end_time DESC NULLS LAST, rollout_id'
    """
    field = sort_by or DEFAULT_ORDER[query]
    if field not in SORTABLE[query]:
        raise InvalidCommand(f"cannot sort by {field!r}: choose one of {', '.join(SORTABLE[query])}")
    if sort_order not in ("asc", "desc"):
        raise InvalidCommand(f"sort_order must be 'asc' or 'desc', not {sort_order!r}")
    return f"{field} {sort_order.upper()} NULLS LAST, {TIEBREAK[query]}"


def _filters(logic: str, **given: Any) -> dict[str, Any]:
    """Bound parameters for optional filters: each value plus a ``use_`` flag, and the logic."""
    if logic not in ("and", "or"):
        raise InvalidCommand(f"filter_logic must be 'and' or 'or', not {logic!r}")
    params: dict[str, Any] = {"logic": logic, "no_filter": all(v is None for v in given.values())}
    for name, value in given.items():
        params[f"use_{name}"] = value is not None
        params[name] = value if value is not None else ([] if name.endswith("_in") else "")
    return params


_PLAIN = {(scope, -1, 0, "sequence_id", "asc") for scope in ("latest", None)}
"""``query_spans`` arguments a fetch of finished rollouts' spans answers: every span or the latest attempt's, in the
default order, one page of all."""


def _stats(text: str | None) -> dict[str, Any] | None:
    """A worker's heartbeat stats as projected (JSON), flat as its caller sent them."""
    return HeartbeatStats.flatten(json.loads(text)) if text else None


def _span(r: dict[str, Any]) -> Span:
    """A span record from its projected row."""
    return Span(
        rollout_id=r["rollout_id"],
        attempt_id=r["attempt_id"],
        sequence_id=r["sequence_id"],
        trace_id=r["trace_id"],
        span_id=r["span_id"],
        parent_id=r["parent_id"],
        name=r["name"],
        status=SpanStatus(status_code=r["status_code"], description=r["status_description"]),
        attributes=json.loads(r["attributes"] or "{}"),
        events=msgspec.json.decode(r["events"] or "[]", type=list[SpanEventInfo]),
        start_time=r["start_time"],
        end_time=r["end_time"],
        resource_attributes=json.loads(r["resource_attributes"] or "{}"),
    )


class QueryMethods(StoreBase):
    """Agent Lightning's query_* methods over the projection."""

    projector_url: str = "http://127.0.0.1:8765"
    projector_token: str | None = None
    _http_client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        """The client's one HTTP connection pool to the projector, made at the first query (a new client per query
        cost ~25 ms of CPU: its TLS context; see BENCHMARKS.md, "Store queries"); closed with the store. A plain
        ``http://`` projector is reached without loading the certificate authorities (~20 ms more per client, a
        wave of ``wait_for_rollouts`` asks it too: ``coldwave.py``); an ``https://`` one verifies its certificate."""
        if self._http_client is None:
            self._http_client = httpx.AsyncClient(verify=not self.projector_url.startswith("http://"))
        return self._http_client

    async def _close_http(self) -> None:
        client, self._http_client = self._http_client, None
        if client is not None:
            await client.aclose()

    async def _query(
        self, name: str, order: str, params: dict[str, Any], limit: int, offset: int
    ) -> tuple[list[dict[str, Any]], int]:
        sql = _QUERIES[name].replace("{order}", order)
        params = {**params, "limit": None if limit < 0 else limit, "offset": max(offset, 0)}
        rows = await self._rows(sql, params)
        total = int(rows[0]["total"]) if rows else 0
        return [r for r in rows if r.get("page_position") is not None], total

    async def _rows(
        self, sql: str, params: dict[str, Any], *, wait_for_writes: bool = True, timeout: float | None = None
    ) -> list[dict[str, Any]]:
        """The rows of ``sql`` once the projector has applied this client's writes and the ends it has seen; with
        ``wait_for_writes=False``, as the projection stands (``coldwave.py``). ``timeout`` bounds that wait and the
        whole request; by default the wait gets ``query_timeout_s`` and the request 30 s more, for the SQL."""
        deadline = self.settings.query_timeout_s if timeout is None else timeout
        min_seq = self.floors() if wait_for_writes else {}
        # no training table is read here: no wait for training rows of attempts that ended (``training``)
        body = {"sql": sql, "params": params, "min_seq": min_seq, "timeout": deadline, "training": False}
        url = self._projector("/sql")
        within = deadline + 30 if timeout is None else timeout
        try:
            response = await self._http().post(url, json=body, headers=self._auth(), timeout=within)
        except httpx.TransportError as exc:
            raise ProjectorUnavailable(f"no projector answers at {url} ({exc}): start `voltbus projector`") from None
        if response.status_code == 504:
            raise ProjectorUnavailable(self._behind(url, response.json().get("error", "")))
        if response.status_code != 200:
            raise InvalidCommand(response.json().get("error", response.text))
        return from_ipc(response.content).to_pylist()

    def _projector(self, path: str) -> str:
        """The URL of ``path`` on the projector."""
        return self.projector_url.rstrip("/") + path

    def _auth(self) -> dict[str, str] | None:
        """The projector's bearer token header, if it has one."""
        return {"Authorization": f"Bearer {self.projector_token}"} if self.projector_token else None

    async def _spans_of_finished(self, rollout_ids: list[str]) -> list[dict[str, Any]]:
        """The spans of every attempt of ``rollout_ids``, with a ``latest`` column, the first one's and those stored
        near it; one row with ``deferred`` true for each of the others (``finished.py``)."""
        params = {"rollout_ids": rollout_ids, "anchor": rollout_ids[0], "near": NEAR_SPANS}
        return await self._rows(_QUERIES["spans_of_finished"], params)

    async def projected_counts(self) -> dict[str, int]:
        """Agent Lightning's ``total_rollouts``, ``total_resources`` (bundle ids), ``total_workers``,
        ``total_attempts`` and ``total_spans`` in the projection, by one query (after this client's writes)."""
        [row] = await self._rows(_QUERIES["statistics"], {})
        return {name: int(count) for name, count in row.items()}

    def _behind(self, url: str, error: str) -> str:
        """Why a query gave up waiting for this client's writes to reach the projection."""
        return (
            f"the projector at {url} did not apply this client's writes within {self.settings.query_timeout_s:g} s"
            f" ({error}): is it running, caught up, and following namespace {self.settings.namespace!r}?"
        )

    async def query_rollouts(
        self,
        *,
        status_in: list[str] | None = None,
        rollout_id_in: list[str] | None = None,
        rollout_id_contains: str | None = None,
        filter_logic: str = "and",
        sort_by: str | None = None,
        sort_order: str = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[Rollout]:
        """Rollouts (with their latest attempt) matching the filters, one page."""
        params = _filters(
            filter_logic, status_in=status_in, rollout_id_in=rollout_id_in, rollout_id_contains=rollout_id_contains
        )
        rows, total = await self._query(
            "query_rollouts", order_clause("query_rollouts", sort_by, sort_order), params, limit, offset
        )
        items = [rollout_view(_state.decode(r["state"])) for r in rows]
        pairs = zip(rows, items, strict=True)
        ended = {r.rollout_id: row["last_seq"] for row, r in pairs if r.status in TERMINAL_ROLLOUT}
        if ended:
            await self.saw_ended(max(ended.values()), list(ended))
        return PaginatedResult(items=items, limit=limit, offset=offset, total=total)

    async def query_attempts(
        self,
        rollout_id: str,
        *,
        sort_by: str = "sequence_id",
        sort_order: str = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[Attempt]:
        """Attempts of a rollout, one page (an unknown rollout gives an empty page)."""
        order = order_clause("query_attempts", sort_by, sort_order)
        rows, total = await self._query("query_attempts", order, {"rollout_id": rollout_id}, limit, offset)
        items = [
            Attempt(
                rollout_id=r["rollout_id"],
                attempt_id=r["attempt_id"],
                sequence_id=r["sequence_id"],
                start_time=r["start_time"],
                end_time=r["end_time"],
                status=r["status"],
                worker_id=r["worker_id"],
                last_heartbeat_time=r["last_heartbeat_time"],
                metadata=json.loads(r["metadata"] or "{}"),
                error={"type": r["error_type"], "message": r["error_message"]} if r["error_type"] else None,
            )
            for r in rows
        ]
        return PaginatedResult(items=items, limit=limit, offset=offset, total=total)

    async def query_spans(
        self,
        rollout_id: str,
        attempt_id: str | None = None,
        *,
        trace_id: str | None = None,
        trace_id_contains: str | None = None,
        span_id: str | None = None,
        span_id_contains: str | None = None,
        parent_id: str | None = None,
        parent_id_contains: str | None = None,
        name: str | None = None,
        name_contains: str | None = None,
        filter_logic: str = "and",
        limit: int = -1,
        offset: int = 0,
        sort_by: str = "sequence_id",
        sort_order: str = "asc",
    ) -> PaginatedResult[Span]:
        """Spans of a rollout (attempt None: all, "latest", or one id) matching the filters, one page."""
        params = _filters(
            filter_logic,
            trace_id=trace_id,
            trace_id_contains=trace_id_contains,
            span_id=span_id,
            span_id_contains=span_id_contains,
            parent_id=parent_id,
            parent_id_contains=parent_id_contains,
            name=name,
            name_contains=name_contains,
        )
        plain = params["no_filter"] and (attempt_id, limit, offset, sort_by, sort_order) in _PLAIN
        if plain and self.finished.knows(rollout_id):
            try:  # finished and seen so by this client: fetched together with the others seen finished with it
                found = await self.finished.rows(rollout_id, self._spans_of_finished)
            except VoltbusError:  # e.g. too many spans for one answer: each is asked for on its own
                found = None
            if found is not None:
                items = [_span(r) for r in found if attempt_id is None or r["latest"]]
                return PaginatedResult(items=items, limit=limit, offset=offset, total=len(items))
        scope = "all" if attempt_id is None else "latest" if attempt_id == "latest" else "one"
        params |= {"rollout_id": rollout_id, "attempt_scope": scope, "attempt_id": attempt_id or ""}
        rows, total = await self._query(
            "query_spans", order_clause("query_spans", sort_by, sort_order), params, limit, offset
        )
        items = [_span(r) for r in rows]
        return PaginatedResult(items=items, limit=limit, offset=offset, total=total)

    async def query_resources(
        self,
        *,
        resources_id: str | None = None,
        resources_id_contains: str | None = None,
        sort_by: str | None = None,
        sort_order: str = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[ResourcesUpdate]:
        """Resources bundles (newest version of each) matching the id filters, one page."""
        params = {
            "use_id": resources_id is not None,
            "resources_id": resources_id or "",
            "use_contains": resources_id_contains is not None,
            "resources_id_contains": resources_id_contains or "",
        }
        order = order_clause("query_resources", sort_by, sort_order)
        rows, total = await self._query("query_resources", order, params, limit, offset)
        items = [
            ResourcesUpdate(
                resources_id=r["resources_id"],
                create_time=r["create_time"],
                update_time=r["update_time"],
                version=r["version"],
                resources=_resources.decode(r["resources"]),
            )
            for r in rows
        ]
        return PaginatedResult(items=items, limit=limit, offset=offset, total=total)

    async def query_workers(
        self,
        *,
        status_in: list[str] | None = None,
        worker_id_contains: str | None = None,
        filter_logic: str = "and",
        sort_by: str | None = None,
        sort_order: str = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[Worker]:
        """Workers matching the status/id filters, one page."""
        params = _filters(filter_logic, status_in=status_in, worker_id_contains=worker_id_contains)
        order = order_clause("query_workers", sort_by, sort_order)
        rows, total = await self._query("query_workers", order, params, limit, offset)
        items = [
            Worker(
                worker_id=r["worker_id"],
                status=r["status"],
                heartbeat_stats=_stats(r["heartbeat_stats"]),
                last_heartbeat_time=r["last_heartbeat_time"],
                last_dequeue_time=r["last_dequeue_time"],
                last_busy_time=r["last_busy_time"],
                last_idle_time=r["last_idle_time"],
                current_rollout_id=r["current_rollout_id"],
                current_attempt_id=r["current_attempt_id"],
            )
            for r in rows
        ]
        return PaginatedResult(items=items, limit=limit, offset=offset, total=total)
