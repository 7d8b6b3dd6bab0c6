"""``run_ppo(config, train_dataset, val_dataset)``: Agent Lightning 1.0's ``agentlightning/verl/entrypoint.py`` on
voltbus. The verl config's batch shape, model, optimizer and steps become GRPO learner settings; its
``agentlightning.local`` agent class and ``env_map`` run on isolated runners through voltbus's gateway; every key
with no effect is named in one warning (``Plan.unused``). ``plan`` is the pure mapping.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from voltbus.services.settings import RunnerSettings, Settings
from voltbus.trainer import GRPO, Trainer

log = logging.getLogger(__name__)

LEARNER_KEYS = {
    "actor_rollout_ref.model.path": "model_dir",
    "data.train_batch_size": "tasks_per_step",
    "actor_rollout_ref.rollout.n": "group_size",
    "actor_rollout_ref.actor.optim.lr": "lr",
    "actor_rollout_ref.actor.ppo_epochs": "epochs",
    "actor_rollout_ref.actor.clip_ratio": "clip",
    "actor_rollout_ref.actor.clip_ratio_low": "clip",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "micro_batch_size",
    "trainer.total_training_steps": "steps",
    "data.seed": "seed",
    "agentlightning.rollout_timeout_seconds": "rollout_timeout_s",
    "agentlightning.async_rollout.enabled": "overlap",
}
"""verl / AL 1.0 config key -> ``LearnerSettings`` field (the same table as AL 0.3's ``VERL(config)``)."""

RULE_KEYS = {
    "algorithm.adv_estimator",
    "actor_rollout_ref.actor.use_kl_loss",
    "actor_rollout_ref.actor.kl_loss_coef",
    "actor_rollout_ref.actor.clip_ratio_high",
    "trainer.total_epochs",
    "agentlightning.local.agent_class",
    "agentlightning.local.env_map",
}
"""Keys read by a rule of their own (``plan``)."""


@dataclass
class Plan:
    """What a verl config asks of voltbus."""

    agent: str
    """The agent to run (``agentlightning.local.agent_class``), loaded by each isolated rollout process."""
    learner: dict[str, Any]
    """``LearnerSettings`` overrides (``GRPO(**learner)``)."""
    env_map: dict[str, str] = field(default_factory=dict)
    """``agentlightning.local.env_map``: the runners' ``env_map``."""
    unused: list[str] = field(default_factory=list)
    """Keys that have no effect in voltbus (each set one, in order)."""


def flatten(config: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``("a.b.c", value)`` for every leaf of a nested mapping (``env_map`` is one leaf).

    >>> dict(flatten({"data": {"train_batch_size": 8}, "agentlightning": {"local": {"env_map": {"Q": "input.q"}}}}))
    {'data.train_batch_size': 8, 'agentlightning.local.env_map': {'Q': 'input.q'}}
    """
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value and path != "agentlightning.local.env_map":
            yield from flatten(value, f"{path}.")
        else:
            yield path, value


def as_dict(config: Any) -> dict[str, Any]:
    """A plain dict of an OmegaConf config (resolved) or of any mapping."""
    if type(config).__module__.startswith("omegaconf"):  # AL's Hydra-composed DictConfig (omegaconf is installed)
        from omegaconf import OmegaConf

        return OmegaConf.to_container(config, resolve=True)  # type: ignore[return-value]
    return dict(config)


def plan(config: Mapping[str, Any], n_train: int) -> Plan:
    """The plan of a verl config for ``n_train`` training tasks; ValueError for one voltbus cannot run.

    >>> p = plan({"data": {"train_batch_size": 4}, "actor_rollout_ref": {"rollout": {"n": 2}},
    ...           "trainer": {"total_epochs": 2, "logger": ["wandb"]},
    ...           "agentlightning": {"local": {"agent_class": "m.Agent", "env_map": {"Q": "input.q"}}}}, n_train=10)
    >>> p.agent, p.learner, p.env_map, p.unused
    ('m.Agent', {'tasks_per_step': 4, 'group_size': 2, 'steps': 4}, {'Q': 'input.q'}, ['trainer.logger'])
    """
    flat = {k: v for k, v in flatten(config) if v is not None}
    agent = flat.get("agentlightning.local.agent_class")
    if not agent:
        raise ValueError(
            "run_ppo: agentlightning.local.agent_class is not set: voltbus runs that agent for each rollout"
        )
    if (estimator := flat.get("algorithm.adv_estimator", "grpo")) != "grpo":
        raise ValueError(f"run_ppo: algorithm.adv_estimator={estimator!r}: voltbus's learner computes GRPO advantages")
    learner = {name: flat[key] for key, name in LEARNER_KEYS.items() if key in flat}
    if "clip" not in learner and "actor_rollout_ref.actor.clip_ratio_high" in flat:
        learner["clip"] = flat["actor_rollout_ref.actor.clip_ratio_high"]
    if flat.get("actor_rollout_ref.actor.use_kl_loss"):
        learner["kl_coef"] = flat.get("actor_rollout_ref.actor.kl_loss_coef", 0.001)  # verl's default coefficient
    if "steps" not in learner and "trainer.total_epochs" in flat:  # verl's dataloader: whole batches per epoch
        learner["steps"] = max(1, n_train // int(learner.get("tasks_per_step", 16))) * int(flat["trainer.total_epochs"])
    if "model_dir" in learner:
        learner["model_dir"] = local_model(str(learner["model_dir"]))
    used = {*LEARNER_KEYS, *RULE_KEYS}
    env_map = {str(k): str(v) for k, v in dict(flat.get("agentlightning.local.env_map") or {}).items()}
    return Plan(agent=str(agent), learner=learner, env_map=env_map, unused=[k for k in flat if k not in used])


def local_model(path: str) -> Path:
    """The model's directory; ValueError when it is not one (voltbus never downloads a model)."""
    found = Path(path).expanduser()
    if not found.is_dir():
        raise ValueError(
            f"run_ppo: actor_rollout_ref.model.path={path!r} is not a local directory: voltbus loads the model from "
            "disk and never downloads one (download it first, then give its path)"
        )
    return found


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
    p = plan(as_dict(config), len(train_dataset))
    if p.unused:
        log.warning("run_ppo: %d config keys have no effect in voltbus: %s", len(p.unused), ", ".join(p.unused))
    s = (settings or Settings()).model_copy(deep=True)
    s.runner = s.runner.model_copy(update={"isolate": True, "env_map": {**s.runner.env_map, **p.env_map}})
    RunnerSettings.model_validate(s.runner.model_dump())  # a bad env_map fails here, before anything starts
    if s.gateway.model_name is None:  # AL 1.0 agents ask for model "auto": the gateway names the served policy
        s.gateway = s.gateway.model_copy(update={"model_name": s.learner.served_model_name})
    algorithm = GRPO(**p.learner, backend=backend)
    return Trainer(algorithm=algorithm, n_runners=n_runners, settings=s).fit(p.agent, train_dataset, val_dataset)
