"""Agent Lightning 0.3's ``Trainer`` arguments on voltbus: what maps onto a voltbus setting is applied, what has
no effect here is accepted and logged once as a warning naming it and why, and what voltbus cannot honour safely
(a store of another kind, a custom runner) is refused with a precise error (docs/training.md, "Trainer")."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from voltbus.projections.adapter import AdapterSettings
from voltbus.services.settings import NatsSettings, Settings

log = logging.getLogger("voltbus.trainer")

DEFAULT_RUNNERS = 8
"""Runners (concurrent rollouts) of a ``Trainer`` given neither ``n_runners`` nor ``n_workers``."""

NO_EFFECT = {
    "tracer": "the runner records every span with its own tracer (emit_* and OpenTelemetry API spans included)",
    "llm_proxy": "voltbus's gateway records the model calls (token ids, logprobs) when a model is served",
    "strategy": "every service runs in this process (runners as concurrent slots); only its n_runners is read",
    "daemon": "the runners are tasks of this process (or process groups it kills), never left behind",
    "dev": "call Trainer.dev(...) for a dry run",
}
"""Agent Lightning arguments voltbus accepts but does not use, with why."""

_AL_ADAPTER_KEYS = {
    "agent_match": "agent_match",
    "llm_call_match": "llm_call_match",
    "exclude_llm_call_in_reward": "exclude_calls_in_reward",
    "reward_match": "reward_policy",
}
"""``TracerTraceToTriplet``'s arguments -> the projector's ``AdapterSettings`` fields."""
_AL_ADAPTER_UNUSED = {"repair_hierarchy", "_skip_empty_token_spans", "type"}
_MESSAGE_ADAPTERS = {"TraceToMessages"}
"""Adapters for prompt optimization: voltbus's APO renders each rollout's trace for the critic itself."""


def warn_unused(name: str, why: str) -> None:
    """Log once (per ``Trainer``) that an accepted argument has no effect, and why."""
    log.warning("Trainer(%s=...) is accepted and has no effect in voltbus: %s", name, why)


def runner_count(n_runners: int | None, n_workers: int | None, strategy: Any) -> int:
    """AL's rule: ``n_runners``, else the deprecated ``n_workers``; a strategy's own ``n_runners`` wins."""
    if n_runners is not None and n_workers is not None and n_workers != n_runners:
        warn_unused("n_workers", f"n_runners={n_runners} is given and wins (n_workers is its deprecated name)")
    count = n_runners if n_runners is not None else n_workers if n_workers is not None else DEFAULT_RUNNERS
    from_strategy = strategy.get("n_runners") if isinstance(strategy, Mapping) else getattr(strategy, "n_runners", None)
    if isinstance(from_strategy, int) and not isinstance(from_strategy, bool) and from_strategy > 0:
        count = from_strategy
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"Trainer: n_runners must be a positive integer, not {count!r}")
    return count


def rollout_cap(max_rollouts: int | None, max_tasks: int | None) -> int | None:
    """``max_rollouts``, else its deprecated name ``max_tasks``; a positive integer or None."""
    if max_rollouts is not None and max_tasks is not None and max_tasks != max_rollouts:
        warn_unused("max_tasks", f"max_rollouts={max_rollouts} is given and wins (max_tasks is its deprecated name)")
    cap = max_rollouts if max_rollouts is not None else max_tasks
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise ValueError(f"Trainer: max_rollouts must be a positive integer or None, not {cap!r}")
    return cap


def adapter_settings(adapter: Any) -> AdapterSettings | None:
    """The projector's adapter settings from AL's ``adapter``: a dict of ``TracerTraceToTriplet`` arguments (or of
    ``AdapterSettings`` fields), such an adapter object, or ``AdapterSettings``; None keeps the defaults."""
    if adapter is None or isinstance(adapter, AdapterSettings):
        return adapter
    kind = adapter.get("type") if isinstance(adapter, Mapping) else adapter if isinstance(adapter, type) else None
    name = _type_name(kind if kind is not None else adapter)
    if name in _MESSAGE_ADAPTERS:
        return None  # APO reads the traces as messages; the training tables keep their defaults
    if isinstance(adapter, Mapping):
        fields = dict(adapter)
    elif isinstance(adapter, type):
        fields = {}
    else:
        known = (*_AL_ADAPTER_KEYS, *AdapterSettings.__struct_fields__)
        fields = {k: getattr(adapter, k) for k in known if hasattr(adapter, k)}
        if not fields:
            raise ValueError(
                f"Trainer(adapter={name}): voltbus cannot read this adapter; pass a dict of TracerTraceToTriplet "
                "arguments (agent_match, llm_call_match, exclude_llm_call_in_reward, reward_match) or AdapterSettings"
            )
    return _settings_from(fields, name)


def _settings_from(fields: dict[str, Any], name: str) -> AdapterSettings:
    if unused := sorted(k for k in fields if k in _AL_ADAPTER_UNUSED and k != "type"):
        log.warning("Trainer(adapter=...): %s accepted and has no effect in voltbus: the projector builds the span "
                    "tree from the spans' parents", ", ".join(unused))  # fmt: skip
    mapped: dict[str, Any] = {}
    for key, value in fields.items():
        if key in _AL_ADAPTER_UNUSED:
            continue
        field = _AL_ADAPTER_KEYS.get(key, key)
        mapped[field] = getattr(value, "value", value)  # RewardMatchPolicy.FIRST_SIBLING -> "first_sibling"
    try:
        return msgspec.convert(mapped, AdapterSettings)
    except msgspec.ValidationError as exc:
        raise ValueError(f"Trainer(adapter={name}): {exc}") from None


def _type_name(kind: Any) -> str:
    if isinstance(kind, str):
        return kind.rpartition(".")[2].rpartition(":")[2]
    return kind.__name__ if isinstance(kind, type) else type(kind).__name__


def store_bus(store: Any) -> NatsSettings | None:
    """The bus (and namespace) of a voltbus store client given as ``store``; anything else is refused."""
    from voltbus.services.clients.store import Store

    if store is None:
        return None
    if isinstance(store, Store) or isinstance(getattr(store, "settings", None), NatsSettings):
        return store.settings.model_copy()
    raise ValueError(
        f"Trainer(store={_type_name(store)}): voltbus keeps rollouts, spans and resources on its event log, not in a "
        "store object; pass a voltbus store client (voltbus.connect(...)) to run on its bus, or set VOLTBUS_NATS__URL"
    )


def check_runner(runner: Any) -> None:
    """AL's default ``LitAgentRunner`` is accepted (voltbus's runner does its job); any other runner is refused."""
    if runner is None:
        return
    if _type_name(runner) == "LitAgentRunner":
        warn_unused("runner", "voltbus's runner claims and runs the rollouts (Trainer's tracer/max_rollouts/hooks)")
        return
    raise ValueError(
        f"Trainer(runner={_type_name(runner)}): voltbus runs agents with its own runner and cannot run a custom "
        "one; per-rollout callbacks go in hooks=[...], runner settings in VOLTBUS_RUNNER__*"
    )


def normalized_hooks(hooks: Any) -> tuple[Any, ...]:
    """AL's ``hooks``: None, one hook, or a sequence of hooks."""
    if hooks is None:
        return ()
    return tuple(hooks) if isinstance(hooks, Sequence) and not isinstance(hooks, str) else (hooks,)


def with_bus(settings: Settings, store: Any, port: int | None) -> Settings:
    """``settings`` on the store client's bus, and with the embedded bus (started when none answers) on ``port``."""
    bus = store_bus(store)
    if bus is None and port is None:
        return settings
    s = settings.model_copy(deep=True)
    if bus is not None:
        s.nats = bus
    if port is not None:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"Trainer: port must be a TCP port number, not {port!r}")
        s.bus = s.bus.model_copy(update={"port": port})
        s.bus.model_fields_set.add("port")
    return s
