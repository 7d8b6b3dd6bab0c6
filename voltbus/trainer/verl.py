"""``VERL(config)``: Agent Lightning 0.3's verl algorithm as voltbus's GRPO learner. The keys of the verl config
that AL's examples pass are read into learner and adapter settings; every other key is listed in one warning
(docs/training.md, "VERL config")."""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec

from voltbus.projections.adapter import AdapterSettings

from .algorithms import GRPO, TrainerView

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
"""verl config key -> ``LearnerSettings`` field."""

ADAPTER_KEYS = {
    "data.max_prompt_length": "max_prompt_length",
    "data.max_response_length": "max_response_length",
    "agentlightning.trace_aggregator.level": "aggregation",
    "agentlightning.trace_aggregator.trajectory_max_prompt_length": "max_prompt_length",
    "agentlightning.trace_aggregator.trajectory_max_response_length": "max_response_length",
}
"""verl config key -> ``AdapterSettings`` field (the training rows the learner reads)."""

OTHER_KEYS = {
    "algorithm.adv_estimator",
    "actor_rollout_ref.actor.use_kl_loss",
    "actor_rollout_ref.actor.kl_loss_coef",
    "actor_rollout_ref.actor.clip_ratio_high",
    "trainer.total_epochs",
    "trainer.val_before_train",
}
"""Keys read by a rule of their own (below)."""

USED_KEYS = {*LEARNER_KEYS, *ADAPTER_KEYS, *OTHER_KEYS}
"""Every key ``VERL(config)`` reads."""

AGGREGATION = {"transition": "call", "trajectory": "trajectory"}
"""AL's ``trace_aggregator.level`` -> ``AdapterSettings.aggregation``."""
TRAJECTORY_DEFAULTS = {"max_prompt_length": 2048, "max_response_length": 8192}
"""AL's defaults of ``trajectory_max_prompt_length`` / ``_response_length`` (its verl ``config.yaml``)."""


def flatten(config: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``("a.b.c", value)`` for every leaf of a nested mapping.

    >>> dict(flatten({"data": {"train_batch_size": 8}, "trainer": {"logger": ["console"]}}))
    {'data.train_batch_size': 8, 'trainer.logger': ['console']}
    """
    for key, value in config.items():
        if isinstance(value, Mapping) and value:
            yield from flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def learner_overrides(flat: dict[str, Any]) -> dict[str, Any]:
    """The ``LearnerSettings`` overrides the config's keys give; a config voltbus cannot train is refused."""
    if (estimator := flat.get("algorithm.adv_estimator", "grpo")) != "grpo":
        raise ValueError(
            f"VERL: algorithm.adv_estimator={estimator!r}: voltbus's learner computes GRPO advantages only"
        )
    out = {field: flat[key] for key, field in LEARNER_KEYS.items() if key in flat}
    if (high := flat.get("actor_rollout_ref.actor.clip_ratio_high")) is not None:
        if "clip" not in out:
            out["clip"] = high
        elif high != out["clip"]:
            log.warning("VERL: clip_ratio_high=%s is not used: voltbus clips symmetrically at %s", high, out["clip"])
    if flat.get("actor_rollout_ref.actor.use_kl_loss"):
        out["kl_coef"] = flat.get("actor_rollout_ref.actor.kl_loss_coef", 0.001)  # verl's default coefficient
    if "model_dir" in out:
        out["model_dir"] = Path(str(out["model_dir"])).expanduser()
        if not out["model_dir"].is_dir():
            raise ValueError(
                f"VERL: actor_rollout_ref.model.path={flat['actor_rollout_ref.model.path']!r} is not a local "
                "directory: voltbus loads the model from disk and never downloads one (download it, then give its path)"
            )
    return out


def adapter_overrides(flat: dict[str, Any]) -> dict[str, Any]:
    """The ``AdapterSettings`` fields the config's keys give: ``data.max_*_length`` per call, or, with trajectory
    aggregation, the ``trajectory_max_*_length`` keys (AL's defaults 2048 and 8192 when absent), as AL reads them."""
    out: dict[str, Any] = {}
    trajectory = flat.get("agentlightning.trace_aggregator.level") == "trajectory"
    for key, field in ADAPTER_KEYS.items():
        length_of = "trajectory" if "trajectory_max" in key else "call" if key.startswith("data.") else None
        if length_of is None or length_of == ("trajectory" if trajectory else "call"):
            if key in flat:
                out[field] = flat[key]
            elif length_of == "trajectory":
                out[field] = TRAJECTORY_DEFAULTS[field]
    if "aggregation" in out:
        level = out["aggregation"]
        if level not in AGGREGATION:
            raise ValueError(f"VERL: agentlightning.trace_aggregator.level={level!r}: transition or trajectory")
        out["aggregation"] = AGGREGATION[level]
    return out


class VERL(GRPO):
    """AL's ``VERL(config)``: GRPO with the config's batch shape, model, learning rate, clip, KL, steps (or epochs)
    and sequence lengths. ``backend``: ``"verl"`` (verl's FSDP2 on one GPU with vLLM, as AL's VERL) or ``"torch"``
    (the CPU learner); None: ``"verl"``."""

    def __init__(
        self,
        config: Mapping[str, Any],
        trainer_cls: Any = None,
        daemon_cls: Any = None,
        *,
        backend: Literal["torch", "verl"] | None = None,
    ) -> None:
        self.config = copy.deepcopy(dict(config))
        flat = {k: v for k, v in flatten(self.config) if v is not None}  # AL's configs leave some keys None
        overrides = learner_overrides(flat) | {"backend": backend or "verl"}
        self.adapter_fields = adapter_overrides(flat)
        msgspec.convert(self.adapter_fields, AdapterSettings)  # a bad length or level fails here
        self.total_epochs: int | None = flat.get("trainer.total_epochs") if "steps" not in overrides else None
        if unused := sorted(k for k in flat if k not in USED_KEYS):
            log.warning("VERL: %d config keys have no effect in voltbus: %s", len(unused), ", ".join(unused))
        if trainer_cls is not None or daemon_cls is not None:
            log.warning(
                "VERL(trainer_cls=..., daemon_cls=...) are accepted and have no effect: the learner is voltbus's"
            )
        super().__init__(**overrides)
        self.validate_before = bool(flat.get("trainer.val_before_train", True))

    async def fit(self, trainer: TrainerView, agent: Any, train: list[Any], val: list[Any]) -> dict[str, Any]:
        """GRPO with the config's settings: ``trainer.total_epochs`` passes become steps (verl's dataloader: whole
        batches of ``data.train_batch_size``), the config's lengths join the trainer's adapter settings."""
        if self.total_epochs is not None and train:
            per_epoch = max(1, len(train) // self.overrides.get("tasks_per_step", 16))
            self.overrides["steps"] = max(1, per_epoch * int(self.total_epochs))
        view = copy.copy(trainer)
        view.adapter = self.adapter_for(trainer)
        return await super().fit(view, agent, train, val)

    def adapter_for(self, trainer: TrainerView) -> AdapterSettings | None:
        """The trainer's adapter settings (``Trainer(adapter=...)``) with the config's lengths and aggregation."""
        if not self.adapter_fields:
            return trainer.adapter
        return msgspec.structs.replace(trainer.adapter or AdapterSettings(), **self.adapter_fields)
