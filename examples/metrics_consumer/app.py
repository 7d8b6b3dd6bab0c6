"""A metrics consumer of your own on voltbus's log, written with FastStream: rollouts queued and ended, the
success rate, rewards and tokens, kept up to date from the control and spans streams as they grow.

    faststream run app:build_app --factory --app-dir examples/metrics_consumer
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from faststream import FastStream, Logger

from voltbus.consumer import Item, log_broker, log_subscriber
from voltbus.schemas.rollouts import AttemptSucceeded, RolloutCancelled, RolloutFailed, RolloutQueued
from voltbus.schemas.spans import ModelCalled, RewardReported
from voltbus.services.eventlog import BadEvent
from voltbus.services.settings import NatsSettings, Settings


@dataclass
class Metrics:
    """What the consumer has counted so far, and the last sequence it read of each stream."""

    queued: int = 0
    ended: dict[str, int] = field(default_factory=lambda: {"succeeded": 0, "failed": 0, "cancelled": 0})
    rewards: int = 0
    reward_sum: float = 0.0
    tokens: int = 0
    undecodable: int = 0
    positions: dict[str, int] = field(default_factory=lambda: {"control": 0, "spans": 0})

    def apply(self, stream: str, item: Item) -> str | None:
        """Count one message of ``stream``; returns what to report when it ended a rollout."""
        self.positions[stream] = item.seq
        if isinstance(item, BadEvent):
            self.undecodable += 1
            return None
        match item.event:
            case RolloutQueued():
                self.queued += 1
            case AttemptSucceeded() | RolloutFailed() | RolloutCancelled() as event:
                outcome = {AttemptSucceeded: "succeeded", RolloutFailed: "failed"}.get(type(event), "cancelled")
                self.ended[outcome] += 1
                return f"rollout {event.rollout_id} {outcome}"
            case RewardReported(value=float() as value):
                self.rewards += 1
                self.reward_sum += value
            case ModelCalled(usage=usage):
                self.tokens += usage.total_tokens
        return None

    def snapshot(self) -> dict[str, Any]:
        """The metrics as one JSON-ready dict."""
        finished = sum(self.ended.values())
        return {
            "queued": self.queued,
            **self.ended,
            "success_rate": round(self.ended["succeeded"] / finished, 3) if finished else None,
            "mean_reward": round(self.reward_sum / self.rewards, 3) if self.rewards else None,
            "tokens": self.tokens,
            "undecodable": self.undecodable,
        }


def build_app(settings: NatsSettings | None = None, metrics: Metrics | None = None) -> FastStream:
    """The consumer: one ordered subscriber per stream of the namespace in ``settings`` (``VOLTBUS_NATS__*``)."""
    settings = settings or Settings().nats
    metrics = metrics if metrics is not None else Metrics()
    broker = log_broker(settings, name="metrics-consumer", log_level=logging.DEBUG)

    @log_subscriber(broker, "control", settings)
    async def on_control(item: Item, logger: Logger) -> None:
        if (ended := metrics.apply("control", item)) is not None:
            logger.info("%s: %s", ended, metrics.snapshot())

    @log_subscriber(broker, "spans", settings)
    async def on_spans(item: Item) -> None:
        metrics.apply("spans", item)

    return FastStream(broker)
