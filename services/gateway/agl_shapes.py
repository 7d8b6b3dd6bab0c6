"""Agent Lightning 1.0's rollout API shapes (``agentlightning/schemas.py``) to and from voltbus's records.

Pure functions: a ``RolloutCreate`` to voltbus's enqueue arguments, a voltbus rollout to AL's ``Rollout``,
the attempt's events to AL's ``Event`` list, and its ``format=triplet`` view (``routes/events.py``).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from voltbus.schemas.rollouts import RolloutConfig
from voltbus.schemas.spans import ModelCalled, RewardReported, SpanRecorded

AGL_CONFIG = "agl_config"
"""The metadata key keeping the AL ``config`` a rollout was created with (``agent_class``, ``k8s``: not used
by voltbus, whose runners run the agent they were started with; given back as it was)."""

STATES = {"queuing": "queuing", "requeuing": "queuing", "preparing": "running", "running": "running"}
"""voltbus rollout status -> AL 1.0 state; every other status ends as ``succeeded`` or ``failed``."""


class LocalConfig(msgspec.Struct, kw_only=True):
    """AL 1.0's ``RolloutLocalConfig``."""

    agent_class: str | None = None
    env_map: dict[str, str] = {}


class K8sConfig(msgspec.Struct, kw_only=True):
    """AL 1.0's ``RolloutK8sConfig``."""

    job_template: str | None = None


class AglConfig(msgspec.Struct, kw_only=True):
    """AL 1.0's ``RolloutConfig``."""

    timeout_seconds: int = 3600
    local: LocalConfig | None = None
    k8s: K8sConfig | None = None


class RolloutCreate(msgspec.Struct, kw_only=True):
    """AL 1.0's ``RolloutCreate``: one item of ``POST /api/rollouts``."""

    input: Any
    is_train: bool = True
    config: AglConfig | None = None
    metadata: dict[str, Any] | None = None
    rollout_id: str | None = None


CREATE = msgspec.json.Decoder(list[RolloutCreate])


def state_of(status: str) -> str:
    """AL 1.0's state for a voltbus rollout status.

    >>> [state_of(s) for s in ("requeuing", "preparing", "succeeded", "cancelled")]
    ['queuing', 'running', 'succeeded', 'failed']
    """
    return STATES.get(status, "succeeded" if status == "succeeded" else "failed")


def enqueue_args(item: RolloutCreate) -> dict[str, Any]:
    """``store.enqueue_rollout`` keyword arguments for one ``RolloutCreate``.

    >>> args = enqueue_args(RolloutCreate(input={"q": 1}, is_train=False,
    ...     config=AglConfig(timeout_seconds=60, local=LocalConfig(agent_class="m.A", env_map={"Q": "input.q"}))))
    >>> args["mode"], args["config"].timeout_seconds, args["config"].env_map
    ('val', 60.0, {'Q': 'input.q'})
    >>> args["metadata"]["agl_config"]["local"]["agent_class"]
    'm.A'
    """
    config = item.config or AglConfig()
    env_map = config.local.env_map if config.local else {}
    timeout = float(config.timeout_seconds) if config.timeout_seconds > 0 else None
    return {
        "input": item.input,
        "mode": "train" if item.is_train else "val",
        "config": RolloutConfig(timeout_seconds=timeout, env_map=env_map),
        "metadata": {**(item.metadata or {}), AGL_CONFIG: msgspec.to_builtins(config)},
        "rollout_id": item.rollout_id,
    }


def al_rollout(rollout: Any, attempts: list[Any]) -> dict[str, Any]:
    """AL 1.0's ``Rollout`` for a voltbus rollout (store client view) and its attempts (in order)."""
    metadata = dict(rollout.metadata or {})
    config = metadata.pop(AGL_CONFIG, None) or {
        "timeout_seconds": int(rollout.config.timeout_seconds or 0),
        "local": {"agent_class": None, "env_map": dict(rollout.config.env_map)} if rollout.config.env_map else None,
        "k8s": None,
    }
    latest = attempts[-1] if attempts else None
    error = latest.error if latest is not None and latest.error else None
    ends = [rollout.end_time, *(a.end_time for a in attempts), *(a.start_time for a in attempts)]
    updated = max([rollout.start_time, *(t for t in ends if t is not None)])
    status = {
        "state": state_of(rollout.status),
        "k8s_job_name": None,
        "last_attempt_id": latest.attempt_id if latest is not None else None,
        "error_message": error["message"] if error else None,
        "version": 1 + len(attempts),
        "created_at": rollout.start_time,
        "updated_at": updated,
    }
    return {
        "rollout_id": rollout.rollout_id,
        "input": rollout.input,
        "is_train": rollout.mode in (None, "train"),
        "config": config,
        "metadata": metadata,
        "status": status,
    }


def al_event(event: Any) -> dict[str, Any] | None:
    """AL 1.0's ``Event`` for a recorded model call, reward or custom event (None for other spans)."""
    match event:
        case ModelCalled():
            data = {
                "model": event.model,
                "model_version": event.resources_id,
                "request": event.request,
                "response": event.response,
                "latency_ms": event.latency_s * 1000,
                "http_status": event.http_status,
                "status": event.status,
                "retry_count": event.retries,
                "usage": msgspec.to_builtins(event.usage),
                "finish_reason": event.finish_reason,
                "prompt_token_ids": event.prompt_ids,
                "response_token_ids": event.response_ids,
                "response_log_probs": event.logprobs,
            }
            if event.error is not None:
                data["error"] = msgspec.to_builtins(event.error)
            return _event("model_request", event, data)
        case RewardReported():
            data = {"value": event.value, **({"dimensions": event.dimensions} if event.dimensions else {})}
            return _event("reward", event, data)
        case SpanRecorded() if event.name.startswith("agl.event."):
            raw = event.attributes.get("agl.data")
            data = json.loads(raw) if isinstance(raw, str) else raw
            return _event(event.name.removeprefix("agl.event."), event, data)
    return None


def _event(kind: str, event: Any, data: Any) -> dict[str, Any]:
    at = event.at if hasattr(event, "at") else event.start_time
    ids = {"rollout_id": event.rollout_id, "attempt_id": event.attempt_id}
    return {"event_type": kind, **ids, "timestamp": at, "data": data}


def triplet(event: dict[str, Any]) -> dict[str, Any]:
    """AL 1.0's ``format=triplet`` form of one event: a model request trimmed to its token ids, log-probs and
    server; a reward to ``value`` (and ``source``, ``reason``); any other event as it is.

    >>> triplet({"event_type": "reward", "data": {"value": 0.7, "dimensions": {"a": 1.0}}})["data"]
    {'value': 0.7}
    """
    data = event["data"]
    if event["event_type"] == "model_request":
        trimmed = {
            "prompt_token_ids": data["prompt_token_ids"],
            "response_token_ids": data["response_token_ids"],
            "response_log_probs": data["response_log_probs"] or None,
            "server": {"model": data["model"], "version": data["model_version"]},
            "http_status": data["http_status"],
            "status": data["status"],
        }
        if "error" in data:
            trimmed["error"] = data["error"]
        return {**event, "data": trimmed}
    if event["event_type"] == "reward" and isinstance(data, dict):
        return {**event, "data": {k: data[k] for k in ("value", "source", "reason") if k in data}}
    return event


def dedupe(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep only the last model request of each prompt (AL 1.0.2: requests without prompt ids are all kept).

    >>> mr = lambda p, r: {"event_type": "model_request", "data": {"prompt_token_ids": p, "response_token_ids": r}}
    >>> out = dedupe([mr([1, 2], [10]), {"event_type": "reward"}, mr([3, 4], [20]), mr([1, 2], [30]), mr([], [])])
    >>> [e["data"]["response_token_ids"] if e["event_type"] != "reward" else "reward" for e in out]
    ['reward', [20], [30], []]
    """
    last: dict[tuple[int, ...], int] = {}
    for i, e in enumerate(events):
        if e["event_type"] == "model_request" and e["data"]["prompt_token_ids"]:
            last[tuple(e["data"]["prompt_token_ids"])] = i
    keep = set(last.values())
    return [
        e
        for i, e in enumerate(events)
        if e["event_type"] != "model_request" or not e["data"]["prompt_token_ids"] or i in keep
    ]
