"""Hostile agents for the agent host: one hunts for bus credentials, one writes to another rollout, one
waits to be killed with its host; and one that says which process it runs in."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
from pathlib import Path
from typing import Any

import msgspec

import voltbus as agl
from voltbus.agent import get_active_tracer
from voltbus.schemas.errors import VoltbusError
from voltbus.schemas.spans import SpanRecorded
from voltbus.services.frames import frame
from voltbus.services.runner.pipe import FinishAttempt, NextSequence, PublishSpans, SequenceIds
from voltbus.services.settings import NatsSettings, Settings

from .isolated_agents import _connects


def _nats_settings_in_memory() -> list[dict[str, Any]]:
    """Every NatsSettings object alive in this process, as its fields (a runner's would hold the password)."""
    found = [o for o in gc.get_objects() if isinstance(o, NatsSettings)]
    return [{"user": s.user, "password": s.password, "url": str(s.url)} for s in found]


@agl.rollout
def credential_hunter(task: dict[str, Any], prompt_template: agl.PromptTemplate) -> float:
    """Dumps what its process holds (environment, /proc/self/environ, argv, settings built here and alive in
    memory, its store) to ``task["dump"]``; tries the bus with every user/password found; 1 when none connected."""
    store = get_active_tracer().store  # type: ignore[union-attr]
    built = Settings()
    seen = {
        "pid": os.getpid(),
        "environ": dict(os.environ),
        "proc_environ": Path("/proc/self/environ").read_bytes().decode(errors="replace"),
        "argv": sys.argv,
        "cmdline": Path("/proc/self/cmdline").read_bytes().decode(errors="replace"),
        "settings": built.model_dump(mode="json") | {"password": built.nats.password},
        "in_memory": _nats_settings_in_memory(),
        "store": {k: repr(v) for k, v in vars(store).items()},
    }
    Path(task["dump"]).write_text(json.dumps(seen, default=repr))
    names = [v for k, v in os.environ.items() if "USER" in k.upper()] + [s["user"] for s in seen["in_memory"]]
    secrets = [v for k, v in os.environ.items() if "PASS" in k.upper() or "TOKEN" in k.upper()]
    secrets += [s["password"] for s in seen["in_memory"]]
    tries = [asyncio.run(_connects(task["url"], u, p)) for u in [*names, None] for p in [*secrets, None]]
    return 0.0 if any(tries) else 1.0


@agl.rollout
async def forger(task: dict[str, Any], prompt_template: agl.PromptTemplate) -> float:
    """Writes to the rollout ``task["victim"]``: raw frames straight to the runner's pipe, then the same requests
    through the host's store; reward 1 when every one of the latter was refused."""
    store = get_active_tracer().store  # type: ignore[union-attr]
    rid, aid = task["victim"], task["victim_attempt"]
    span = SpanRecorded(
        event_id="forged-span", rollout_id=rid, attempt_id=aid, sequence_id=1,
        trace_id="0" * 32, span_id="1" * 16, name="forged", start_time=1.0,
    )  # fmt: skip
    requests = [
        PublishSpans(events=[span]),
        FinishAttempt(rollout_id=rid, attempt_id=aid),
        NextSequence(rollout_id=rid, count=5),
        SequenceIds(pairs=[(rid, aid)]),
    ]
    for n, request in enumerate(requests):  # crafted by hand: ids the host never issued
        os.write(store.requests_fd, frame(msgspec.msgpack.encode({"id": 10**9 + n, "request": request})))
    refusals = []
    for request in requests:
        try:
            await store.call(request)
            refusals.append("accepted")
        except VoltbusError as exc:
            refusals.append(f"{type(exc).__name__}: {exc}")
    Path(task["dump"]).write_text(json.dumps(refusals))  # noqa: ASYNC240  # a few bytes, once
    return 1.0 if all(r.startswith("NotYourAttempt") for r in refusals) else 0.0


@agl.rollout
async def waits_on_first_attempt(
    task: dict[str, Any], prompt_template: agl.PromptTemplate, rollout: agl.AttemptedRollout
) -> float:
    """Appends ``<pid> <attempt>`` to ``task["pidfile"]``; its first attempt waits (for its host to be killed)."""
    with open(task["pidfile"], "a") as pids:  # noqa: ASYNC230  # a line, once
        pids.write(f"{os.getpid()} {rollout.attempt.sequence_id}\n")
    if rollout.attempt.sequence_id == 1:
        await asyncio.sleep(3600)  # stands for agent work: the test kills the host meanwhile
    return 1.0


@agl.rollout
def reports_its_pid(task: Any, prompt_template: agl.PromptTemplate) -> float:
    """Reward: the id of the process it ran in."""
    return float(os.getpid())
