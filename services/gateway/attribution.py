"""Which rollout and attempt a call belongs to: from the path, or the ``X-Voltbus-*`` headers.

A call naming a rollout or attempt the log does not know is refused with 404 before anything is
proxied. A call naming none is proxied and, when ``record_unattributed`` is on, recorded under
rollout and attempt id ``unattributed`` (so nothing the engine sampled goes unseen). Known pairs
are cached: attempts are never deleted from the log. A call's mode is the path's
(``/mode/{train|val}/``) or else the rollout's own (``train``, ``val``, ``test``).
"""

from __future__ import annotations

from starlette.requests import Request

from voltbus.schemas.errors import UnknownRollout
from voltbus.store import Store

from .errors import GatewayError

UNATTRIBUTED = "unattributed"
ROLLOUT_HEADER = "x-voltbus-rollout-id"
ATTEMPT_HEADER = "x-voltbus-attempt-id"
MODES = ("train", "val")


def claimed_rollout(request: Request) -> str | None:
    """The rollout a request names (path first, then header), before any check."""
    return request.path_params.get("rid") or request.headers.get(ROLLOUT_HEADER) or None


class Attribution:
    """Resolves and checks (rollout, attempt) pairs against the store."""

    def __init__(self, store: Store, cache_size: int = 100_000) -> None:
        self.store = store
        self.known: dict[tuple[str, str], str | None] = {}
        self.cache_size = cache_size

    async def resolve(self, request: Request) -> tuple[str, str, str | None]:
        """The call's (rollout id, attempt id, mode); raises 404 GatewayError for unknown ones."""
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
        if aid and (rid, aid) in self.known:
            return rid, aid, mode or self.known[(rid, aid)]
        rid, aid, own = await self._check(rid, aid)
        return rid, aid, mode or own

    async def _check(self, rid: str, aid: str | None) -> tuple[str, str, str | None]:
        try:
            attempts = await self.store.get_attempts(rid)
            rollout = await self.store.get_rollout_by_id(rid)
        except UnknownRollout:
            raise GatewayError(404, "unknown_rollout", f"unknown rollout {rid!r}", rollout_id=rid) from None
        ids = [a.attempt_id for a in attempts]
        if aid is None:  # header attribution naming only the rollout: its latest attempt
            if not ids:
                raise GatewayError(404, "unknown_attempt", f"rollout {rid!r} has no attempt yet", rollout_id=rid)
            aid = ids[-1]
        elif aid not in ids:
            raise GatewayError(404, "unknown_attempt", f"rollout {rid!r} has no attempt {aid!r}", rollout_id=rid)
        if len(self.known) >= self.cache_size:
            self.known.clear()
        mode = rollout.mode if rollout is not None else None
        self.known[(rid, aid)] = mode
        return rid, aid, mode
