"""Which rollout and attempt a call belongs to: from the path, or the ``X-Voltbus-*`` headers.

A call naming a rollout or attempt id that cannot be one (not a NATS subject token) is refused with
400 ``invalid_id``, one the log does not know with 404, before anything is proxied. A call naming
none is proxied and, when ``record_unattributed`` is on, recorded under rollout and attempt id
``unattributed`` (so nothing the engine sampled goes unseen). A call's mode
is the path's (``/mode/{train|val}/``) or else the rollout's own (``train``, ``val``, ``test``).

A call naming an attempt that has ended (succeeded, failed, timed out, superseded by a retry, or
its rollout ended) is refused with 403 ``attempt_ended``: the attempt's key is revoked with it, so
a straggler of a timed-out agent cannot add calls or rewards to a finished attempt. What the log
says is cached per rollout; ``watch`` follows the rollouts' lifecycle subjects and drops a
rollout's entry on each of its events, so the next call reads the new state (the refusal lags the
end by the bus's delivery time, about a millisecond on loopback).
"""

from __future__ import annotations

from dataclasses import dataclass

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy
from starlette.requests import Request

from voltbus.schemas import is_token
from voltbus.schemas.errors import InvalidId, UnknownRollout
from voltbus.services.clients.store import Store

from .errors import GatewayError

UNATTRIBUTED = "unattributed"
ROLLOUT_HEADER = "x-voltbus-rollout-id"
ATTEMPT_HEADER = "x-voltbus-attempt-id"
MODES = ("train", "val")
ENDED_ATTEMPT = ("succeeded", "failed", "timeout")
ENDED_ROLLOUT = ("succeeded", "failed", "cancelled")


def claimed_rollout(request: Request) -> str | None:
    """The rollout a request names (path first, then header), before any check against the log; 400
    GatewayError when it, or the attempt named beside it, cannot be an id (a NATS subject token)."""
    params, headers = request.path_params, request.headers
    rid = params.get("rid") or headers.get(ROLLOUT_HEADER) or None
    for kind, value in (("rollout id", rid), ("attempt id", params.get("aid") or headers.get(ATTEMPT_HEADER))):
        if value and not is_token(value):
            shown = value if len(value) <= 64 else f"{value[:64]}... ({len(value)} characters)"
            raise GatewayError(400, "invalid_id", str(InvalidId(kind, shown)))
    return rid


@dataclass(frozen=True)
class Known:
    """What the log said about one rollout: its mode, its attempts in order, and why each ended."""

    mode: str | None
    ended: dict[str, str | None]
    """Attempt id -> why it ended (None while it may still run), in attempt order."""

    @property
    def latest(self) -> str | None:
        """The latest attempt's id."""
        return next(reversed(self.ended), None)


def why_ended(rollout_status: str, attempt_status: str, latest: bool) -> str | None:
    """Why an attempt can take no more calls, or None.

    >>> why_ended("running", "running", True) is None
    True
    >>> why_ended("requeuing", "timeout", True), why_ended("running", "unresponsive", False)
    ('the attempt ended (timeout)', 'a later attempt superseded it')
    """
    if rollout_status in ENDED_ROLLOUT:
        return f"the rollout ended ({rollout_status})"
    if attempt_status in ENDED_ATTEMPT:
        return f"the attempt ended ({attempt_status})"
    return None if latest else "a later attempt superseded it"


class Attribution:
    """Resolves and checks (rollout, attempt) pairs against the store."""

    def __init__(self, store: Store, cache_size: int = 100_000, refuse_ended: bool = True) -> None:
        self.store = store
        self.known: dict[str, Known] = {}
        self.loading: dict[str, list[int]] = {}
        """Rollouts being read from the log: [reads in flight, changes seen meanwhile]."""
        self.cache_size = cache_size
        self.refuse_ended = refuse_ended

    async def watch(self) -> JetStreamContext.PushSubscription:
        """Follow new lifecycle events of every rollout (headers only), dropping their cached state."""
        topology = self.store.log.topology
        return await self.store.log.js.subscribe(
            topology.every_rollout,
            stream=topology.control_stream,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.NEW,
            headers_only=True,
            cb=self._changed,
        )

    async def _changed(self, msg: Msg) -> None:
        self.forget(msg.subject.split(".")[-2])

    def forget(self, rollout_id: str) -> None:
        """Drop what is cached about a rollout (its state changed)."""
        self.known.pop(rollout_id, None)
        if (loading := self.loading.get(rollout_id)) is not None:
            loading[1] += 1  # a read in flight may predate the change: it is not cached

    async def resolve(self, request: Request) -> tuple[str, str, str | None]:
        """The call's (rollout id, attempt id, mode); 404 GatewayError for unknown ones, 403 for ended ones."""
        params = request.path_params
        mode = params.get("mode")
        if mode is not None and mode not in MODES:
            raise GatewayError(404, "not_found", f"unsupported proxy mode {mode!r} (train or val)")
        rid = claimed_rollout(request)
        aid = params.get("aid") or request.headers.get(ATTEMPT_HEADER)
        if not rid:
            if aid:
                raise GatewayError(400, "invalid_request", f"{ATTEMPT_HEADER} given without {ROLLOUT_HEADER}")
            return UNATTRIBUTED, UNATTRIBUTED, mode
        known = self.known.get(rid)
        if known is None or (aid is not None and aid not in known.ended):
            known = await self._load(rid)
        aid = aid or known.latest
        if aid is None:  # header attribution naming only the rollout: its latest attempt
            raise GatewayError(404, "unknown_attempt", f"rollout {rid!r} has no attempt yet", rollout_id=rid)
        if aid not in known.ended:
            raise GatewayError(404, "unknown_attempt", f"rollout {rid!r} has no attempt {aid!r}", rollout_id=rid)
        if self.refuse_ended and (why := known.ended[aid]) is not None:
            message = f"attempt {aid!r} of rollout {rid!r} takes no more calls or events: {why}; its key is revoked"
            raise GatewayError(403, "attempt_ended", message, rollout_id=rid, attempt_id=aid)
        return rid, aid, mode or known.mode

    async def _load(self, rid: str) -> Known:
        loading = self.loading.setdefault(rid, [0, 0])
        loading[0], changes = loading[0] + 1, loading[1]
        try:
            attempts = await self.store.get_attempts(rid)
            rollout = await self.store.get_rollout_by_id(rid)
        except UnknownRollout:
            raise GatewayError(404, "unknown_rollout", f"unknown rollout {rid!r}", rollout_id=rid) from None
        finally:
            loading[0] -= 1
            if loading[0] == 0:
                del self.loading[rid]
        status = rollout.status if rollout is not None else ""
        last = len(attempts) - 1
        ended = {a.attempt_id: why_ended(status, a.status, i == last) for i, a in enumerate(attempts)}
        known = Known(mode=rollout.mode if rollout is not None else None, ended=ended)
        if len(self.known) >= self.cache_size:
            self.known.clear()
        if loading[1] == changes:  # nothing changed while reading: cache it
            self.known[rid] = known
        return known
