"""What each kill -9 victim of the training run must leave behind, beyond the checkers over the whole log:
a killed runner's attempts end per their rollout's retry policy, a restarted inference server serves the
newest weights, a restarted dashboard answers with the projection's data."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import wait_for
from voltbus.schemas.resources import ResourcesPublished
from voltbus.services.eventlog import Envelope
from voltbus.services.lifecycle.state import ACTIVE_ATTEMPT

from . import checkers
from .system import System


def held_by(stored: checkers.Stored, prefix: str) -> list[tuple[str, str]]:
    """The (rollout, attempt) pairs whose latest attempt is in progress on workers ``prefix*``."""
    held = []
    for rid, events in checkers.histories(stored).items():
        latest = checkers.fold(events).latest
        if latest is not None and latest.status in ACTIVE_ATTEMPT and (latest.worker_id or "").startswith(prefix):
            held.append((rid, latest.attempt_id))
    return held


def attempt_end_errors(stored: checkers.Stored, held: list[tuple[str, str]]) -> list[str]:
    """Why the attempts a killed runner held did not end per their rollout's config (empty: they did).

    Each must have ended; one that ended with a status the retry policy retries, below ``max_attempts``,
    must have been followed by another attempt; the rollout must be terminal."""
    found, errors = checkers.histories(stored), []
    for rid, aid in held:
        state = checkers.fold(found.get(rid, []))
        attempt = state.attempt(aid)
        if attempt is None or attempt.status in ACTIVE_ATTEMPT:
            errors.append(f"{rid}/{aid} still {attempt.status if attempt else 'unknown'} after its runner was killed")
            continue
        retried = state.latest is not None and state.latest.sequence_id > attempt.sequence_id
        retryable = attempt.status in state.config.retry_condition
        if attempt.status != "succeeded" and retryable and attempt.sequence_id < state.config.max_attempts:
            if not retried:
                errors.append(f"{rid}/{aid} ended {attempt.status} (attempt {attempt.sequence_id}) and was not retried")
        if state.status not in ("succeeded", "failed", "cancelled"):
            errors.append(f"{rid} is {state.status} after its attempt {aid} ended {attempt.status}")
    return errors


def newest_weights(stored: checkers.Stored) -> str | None:
    """The label (``resources_id``) of the newest resources version that names weights."""
    labels = [
        e.event.resources_id
        for e in stored
        if isinstance(e, Envelope)
        and isinstance(e.event, ResourcesPublished)
        and any(getattr(r, "weights", None) is not None for r in e.event.resources.values())
    ]
    return labels[-1] if labels else None


async def serves(system: System, label: str, deadline_s: float = 60.0) -> dict[str, Any]:
    """Wait until the inference server reports ``label`` as its weight version; its /healthz."""
    url, seen = f"http://127.0.0.1:{system.port('inference')}/healthz", {}

    async def current() -> bool:  # another process's state, from its health endpoint
        nonlocal seen
        async with httpx.AsyncClient() as http:
            seen = (await http.get(url, timeout=5)).json()
        return seen.get("weight_version") == label

    try:
        await wait_for(current, deadline_s, f"inference serving {label}", every=0.2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; it reports {seen}") from None
    return seen


async def dashboard_overview(system: System) -> dict[str, Any]:
    """The dashboard's overview (it reads the projector's SQL with the token; we send the dashboard's): 200 and its
    JSON."""
    async with httpx.AsyncClient(headers=system.dashboard_auth()) as http:
        reply = await http.get(f"http://127.0.0.1:{system.port('dashboard')}/api/overview", timeout=30)
    assert reply.status_code == 200, reply.text
    return reply.json()  # type: ignore[no-any-return]
