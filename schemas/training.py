"""Training-run events: a run's start, steps, checkpoints and end (control stream, one subject per run)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from .base import Event, Id, Json, Timestamp
from .resources import Sha256

Step = Annotated[int, msgspec.Meta(ge=0)]
"""A learner step number, from 0."""


class RunStarted(Event, frozen=True, kw_only=True):
    """A training run began."""

    run_id: Id
    """The run's id; also a subject token."""
    algorithm: str
    """Algorithm name, e.g. ``grpo``, ``ppo``, ``apo``."""
    config: Json
    """The run's full configuration, as any JSON value."""
    at: Timestamp
    """When the run started."""


class StepStarted(Event, frozen=True, kw_only=True):
    """The learner began a step: the policy version its batch samples with, and the batch's rollouts.

    A learner that restarts finds the step it was in and waits for these rollouts instead of
    enqueueing a second batch."""

    run_id: Id
    """The run."""
    step: Step
    """The step begun."""
    resources_id: Id | None = None
    """The resources version (pinned ``<bundle>:<version>``) the batch samples with."""
    rollout_ids: list[Id] = []
    """The rollouts of the step's batch, in enqueue order."""
    at: Timestamp
    """When the step began."""


class StepCompleted(Event, frozen=True, kw_only=True):
    """The learner finished one update step."""

    run_id: Id
    """The run."""
    step: Step
    """The step just completed."""
    metrics: dict[str, float] = {}
    """Namespaced metrics of the step, e.g. ``train/loss``."""
    resources_id: Id | None = None
    """The resources version the step published, if any."""
    at: Timestamp
    """When the step completed."""


class CheckpointSaved(Event, frozen=True, kw_only=True):
    """The learner wrote a checkpoint."""

    run_id: Id
    """The run."""
    step: Step
    """The step the checkpoint holds."""
    uri: str
    """Where the checkpoint is stored."""
    sha256: Sha256
    """Digest of the checkpoint file (or of its manifest)."""
    at: Timestamp
    """When it was saved."""


class RunFinished(Event, frozen=True, kw_only=True):
    """A training run ended."""

    run_id: Id
    """The run."""
    status: Literal["succeeded", "failed", "cancelled"]
    """How it ended."""
    reason: str | None = None
    """Why it failed or was cancelled, if said."""
    at: Timestamp
    """When it ended."""


TrainingEvent = RunStarted | StepStarted | StepCompleted | CheckpointSaved | RunFinished
"""Every event on a run's subject."""
