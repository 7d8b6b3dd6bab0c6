"""The dashboard's routes: the page, its static files, and the JSON endpoints the page polls."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response

from voltbus.schemas import is_token
from voltbus.schemas.errors import InvalidId

from .reader import Projections, ProjectorDown, QueryFailed
from .texts import prompt_text, response_text

STATIC = Path(__file__).parent / "static"
Handler = Callable[[Request], Awaitable[Response]]
MAX_PARAM = 256
"""Longest query parameter value accepted (ids are far shorter); 400 past it."""


class BadParam(ValueError):
    """A query parameter the dashboard refuses."""


def param(request: Request, name: str) -> str:
    """An id from the query ("" when absent); BadParam when it is over ``MAX_PARAM`` characters or cannot
    be an id (a NATS subject token)."""
    value = request.query_params.get(name, "")
    if len(value) > MAX_PARAM:
        raise BadParam(f"{name} is {len(value)} characters long, over the limit of {MAX_PARAM}")
    if value and not is_token(value):
        raise BadParam(str(InvalidId(name.replace("_", " "), value)))
    return value


def answering(handler: Callable[[Request, Projections], Awaitable[dict[str, object]]]) -> Handler:
    """Wrap a handler: its dict as JSON; 503 when no projector answers, 502 when a query fails, 400 for a
    query parameter that is not an id."""

    async def endpoint(request: Request) -> Response:
        projections: Projections = request.app.state.projections
        try:
            return JSONResponse(await handler(request, projections))
        except ProjectorDown as exc:
            return JSONResponse({"error": str(exc), "state": "down"}, status_code=503)
        except QueryFailed as exc:
            return JSONResponse({"error": str(exc), "state": "error"}, status_code=502)
        except BadParam as exc:
            return JSONResponse({"error": str(exc), "state": "error"}, status_code=400)

    return endpoint


async def health(request: Request) -> Response:
    """Whether the dashboard answers (no token needed: it says nothing of the projection)."""
    return JSONResponse({"state": "ok"})


async def page(request: Request) -> Response:
    return FileResponse(STATIC / "index.html")


async def static(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in {"dashboard.js", "dashboard.css"}:
        return JSONResponse({"error": f"no static file {name}"}, status_code=404)
    return FileResponse(STATIC / name)


async def config(request: Request) -> Response:
    settings = request.app.state.settings
    return JSONResponse({"projector_url": request.app.state.projections.url, "poll_s": settings.poll_s})


@answering
async def overview(request: Request, db: Projections) -> dict[str, object]:
    """Statuses, runner health, runs, failures, data quality and the projection's health (quarantine, gaps,
    divergences): everything that is not one run or one rollout."""
    stale_s = request.app.state.settings.stale_s
    rollouts, attempts, workers, runs, failures, causes, quality, [health] = await asyncio.gather(
        db.rows("rollout_statuses"),
        db.rows("attempt_statuses"),
        db.rows("workers", now=time.time(), stale_s=stale_s),
        db.rows("runs"),
        db.rows("failures"),
        db.rows("failure_causes"),
        db.rows("data_quality"),
        db.rows("log_health"),
    )
    empty = not (rollouts or workers or runs)
    return {
        "rollouts": rollouts,
        "attempts": attempts,
        "workers": workers,
        "stale_s": stale_s,
        "runs": runs,
        "failures": failures,
        "failure_causes": causes,
        "quality": quality,
        "log_health": health,
        "empty": empty,
    }


@answering
async def run(request: Request, db: Projections) -> dict[str, object]:
    """One run's curves: sampled reward and staleness per step, validation reward per version (at the step that
    samples with it), and the batches' reward per resources version."""
    run_id = param(request, "run_id")
    steps, validation, versions = await asyncio.gather(
        db.rows("run_steps", run_id=run_id),
        db.rows("run_validation", run_id=run_id),
        db.rows("version_rewards", run_id=run_id),
    )
    return {"run_id": run_id, "steps": steps, "validation": validation, "versions": versions}


@answering
async def rollouts(request: Request, db: Projections) -> dict[str, object]:
    """The newest rollouts, for the picker."""
    return {"rollouts": await db.rows("recent_rollouts")}


@answering
async def rollout(request: Request, db: Projections) -> dict[str, object]:
    """One rollout: its input, attempts, spans (the page nests them), model calls (text and token ids) and rewards."""
    rid = param(request, "rollout_id")
    found, attempts, spans, calls, rewards = await asyncio.gather(
        *(
            db.rows(name, rollout_id=rid)
            for name in ("rollout", "rollout_attempts", "rollout_spans", "rollout_calls", "rollout_rewards")
        )
    )
    return {
        "rollout_id": rid,
        "rollout": found[0] if found else None,
        "attempts": attempts,
        "spans": spans,
        "calls": [said(call) for call in calls],
        "rewards": rewards,
    }


def said(call: dict[str, object]) -> dict[str, object]:
    """A model call as the page shows it: its prompt and response text in place of the raw bodies."""
    request, response = call.pop("request", None), call.pop("response", None)
    return call | {"prompt_text": prompt_text(request), "response_text": response_text(response)}
