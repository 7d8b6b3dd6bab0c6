"""Hostile isolated agents: one looks for bus credentials, one writes to another rollout by hand."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import msgspec
import nats

import voltbus as agl
from voltbus.agent import get_active_tracer
from voltbus.services.frames import frame
from voltbus.services.runner.pipe import MAX_FRAME


async def _connects(url: str, user: str | None, password: str | None) -> bool:
    try:
        client = await nats.connect(
            url, user=user, password=password, connect_timeout=1, allow_reconnect=False, max_reconnect_attempts=0
        )
    except Exception:
        return False
    await client.close()
    return True


@agl.rollout
def credential_hunter(task: dict[str, Any], prompt_template: agl.PromptTemplate) -> float:
    """Dumps what its process can see (environment, argv, stdin, its store) to ``task["dump"]`` and
    tries the bus with every user/password pair found; reward 1 when no connection succeeded."""
    store = get_active_tracer().store  # type: ignore[union-attr]
    seen = {
        "environ": dict(os.environ),
        "argv": sys.argv,
        "cmdline": Path("/proc/self/cmdline").read_bytes().decode(errors="replace"),
        "stdin": sys.stdin.read(),
        "store": {k: repr(v) for k, v in vars(store).items()},
        "task": task,
    }
    Path(task["dump"]).write_text(json.dumps(seen, default=repr))
    names = [v for k, v in os.environ.items() if "USER" in k.upper()] + [None]
    secrets = [v for k, v in os.environ.items() if "PASS" in k.upper() or "TOKEN" in k.upper()] + [None]
    tries = [asyncio.run(_connects(task["url"], u, p)) for u in names for p in secrets]
    return 0.0 if any(tries) else 1.0


def _raw_call(store: Any, request: dict[str, Any]) -> dict[str, Any]:
    """A request frame crafted by hand, written straight to the runner's pipe; its decoded reply."""
    os.write(store.requests_fd, frame(msgspec.msgpack.encode({"id": 7, "request": request})))
    size = int.from_bytes(os.read(store.replies_fd, 4), "big")
    assert size < MAX_FRAME
    body = b""
    while len(body) < size:
        body += os.read(store.replies_fd, size - len(body))
    return msgspec.msgpack.decode(body)


@agl.rollout
def forger(task: dict[str, Any], prompt_template: agl.PromptTemplate) -> float:
    """Writes to the rollout ``task["victim"]`` through the pipe; reward 1 when every request was refused."""
    store = get_active_tracer().store  # type: ignore[union-attr]
    rid, aid = task["victim"], task["victim_attempt"]
    span = {
        "type": "SpanRecorded", "event_id": "forged-span", "rollout_id": rid, "attempt_id": aid, "sequence_id": 1,
        "trace_id": "0" * 32, "span_id": "1" * 16, "name": "forged", "start_time": 1.0,
    }  # fmt: skip
    requests = [
        {"op": "publish_spans", "events": [span]},
        {"op": "finish_attempt", "rollout_id": rid, "attempt_id": aid},
        {"op": "next_sequence", "rollout_id": rid, "count": 5},
        {"op": "sequence_ids", "pairs": [[rid, aid]]},
    ]
    replies = [_raw_call(store, r) for r in requests]
    Path(task["dump"]).write_text(json.dumps(replies))
    return 1.0 if all(r["kind"] == "refused" for r in replies) else 0.0
