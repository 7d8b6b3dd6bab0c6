"""``run_ppo(config, train_dataset, val_dataset)``: Agent Lightning 1.0's ``agentlightning/verl/entrypoint.py`` on
voltbus. The verl config's batch shape, model, optimizer and steps become GRPO learner settings; its
``agentlightning.local`` agent class and ``env_map`` run on isolated runners through voltbus's gateway; every key
with no effect is named in one warning (``Plan.unused``). ``plan`` is the pure mapping.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from voltbus.services.settings import RunnerSettings, Settings, check_lora_names
from voltbus.trainer import Trainer, verl

log = logging.getLogger(__name__)

LOCAL = "agentlightning.local"
"""AL 1.0's keys for the agent (``agent_class``, ``env_map``): the rest of the config is AL 0.3's ``VERL(config)``'s."""


@dataclass
class Plan:
    """What a verl config asks of voltbus."""

    agent: str
    """The agent to run (``agentlightning.local.agent_class``), loaded by each isolated rollout process."""
    learner: dict[str, Any]
    """``LearnerSettings`` overrides (``GRPO(**learner)``)."""
    env_map: dict[str, str] = field(default_factory=dict)
    """``agentlightning.local.env_map``: the runners' ``env_map``."""
    adapter: dict[str, Any] = field(default_factory=dict)
    """``AdapterSettings`` fields (lengths, trace aggregation) for the training rows."""
    unused: list[str] = field(default_factory=list)
    """Keys that have no effect in voltbus (each set one, in order)."""


def as_dict(config: Any) -> dict[str, Any]:
    """A plain dict of an OmegaConf config (resolved) or of any mapping."""
    if type(config).__module__.startswith("omegaconf"):  # AL's Hydra-composed DictConfig (omegaconf is installed)
        from omegaconf import OmegaConf

        return OmegaConf.to_container(config, resolve=True)  # type: ignore[return-value]
    return dict(config)


def split(config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``agentlightning.local`` (AL 1.0's agent) and the rest of the config (``VERL(config)``'s keys)."""
    rest = copy.deepcopy(dict(config))
    agl = dict(rest.get("agentlightning") or {})
    local = dict(agl.pop("local", None) or {})
    if agl:
        rest["agentlightning"] = agl
    else:
        rest.pop("agentlightning", None)
    return local, rest


def plan(config: Mapping[str, Any], n_train: int) -> Plan:
    """The plan of a verl config for ``n_train`` training tasks (``VERL(config)``'s mapping, and AL 1.0's agent);
    ValueError for one voltbus cannot run.

    >>> p = plan({"data": {"train_batch_size": 4}, "actor_rollout_ref": {"rollout": {"n": 2}},
    ...           "trainer": {"total_epochs": 2, "logger": ["wandb"]},
    ...           "agentlightning": {"local": {"agent_class": "m.Agent", "env_map": {"Q": "input.q"}}}}, n_train=10)
    >>> p.agent, p.learner, p.env_map, p.unused
    ('m.Agent', {'tasks_per_step': 4, 'group_size': 2, 'steps': 4}, {'Q': 'input.q'}, ['trainer.logger'])
    """
    local, rest = split(config)
    if not (agent := local.get("agent_class")):
        raise ValueError(
            "run_ppo: agentlightning.local.agent_class is not set: voltbus runs that agent for each rollout"
        )
    flat = {k: v for k, v in verl.flatten(rest) if v is not None}
    learner = verl.learner_overrides(flat)
    if "steps" not in learner and "trainer.total_epochs" in flat:  # verl's dataloader: whole batches per epoch
        learner["steps"] = max(1, n_train // int(learner.get("tasks_per_step", 16))) * int(flat["trainer.total_epochs"])
    env_map = {str(k): str(v) for k, v in dict(local.get("env_map") or {}).items()}
    unused = [f"{LOCAL}.{k}" for k in local if k not in ("agent_class", "env_map")]
    unused += [k for k in flat if k not in verl.USED_KEYS]
    return Plan(str(agent), learner, env_map, verl.adapter_overrides(flat), unused)


def run_ppo(
    config: Any,
    train_dataset: Sequence[Any],
    val_dataset: Sequence[Any],
    *,
    backend: Literal["torch", "verl"] = "verl",
    settings: Settings | None = None,
    n_runners: int = 8,
) -> dict[str, Any]:
    """Train ``agentlightning.local.agent_class`` with GRPO as AL 1.0's ``run_ppo`` does: isolated runners (one process
    per rollout, ``AGL_*`` and ``env_map`` variables set), validation on ``val_dataset`` before and after; returns the
    learner's result. ``backend``: ``"verl"`` (one CUDA GPU, as AL) or ``"torch"`` (the CPU learner)."""
    if not train_dataset or not val_dataset:
        raise ValueError("run_ppo: train_dataset and val_dataset must be non-empty sequences of tasks (as in AL 1.0)")
    config = as_dict(config)
    p = plan(config, len(train_dataset))  # refuses what cannot run, before anything starts
    if extra := [k for k in p.unused if k.startswith(f"{LOCAL}.")]:
        log.warning("run_ppo: %d config keys have no effect in voltbus: %s", len(extra), ", ".join(extra))
    s = (settings or Settings()).model_copy(deep=True)
    s.runner = s.runner.model_copy(update={"isolate": True, "env_map": {**s.runner.env_map, **p.env_map}})
    RunnerSettings.model_validate(s.runner.model_dump())  # a bad env_map fails here, before anything starts
    if s.gateway.model_name is None:  # AL 1.0 agents ask for model "auto": the gateway names the served policy
        s.gateway = s.gateway.model_copy(update={"model_name": s.learner.served_model_name})
    check_lora_names(s)  # (a copy is not validated again)
    algorithm = verl.VERL(split(config)[1], backend=backend)  # it warns of the other unused keys
    return Trainer(algorithm=algorithm, n_runners=n_runners, settings=s).fit(p.agent, train_dataset, val_dataset)
