"""Stream names and subject builders: every subject voltbus uses is built here.

A topology is named by a namespace (``vb`` by default) so several deployments, or every test,
can share one nats-server without seeing each other's streams.

    control stream  <NS>_CTRL   <ns>.ro.<rollout>.q   dispatchable: queued, requeued
                                <ns>.ro.<rollout>.e   the other rollout/attempt events of writers' own
                                <ns>.ro.<rollout>.c   by authority: timeouts, unresponsive, cancel, updates,
                                                      unsigned final failure (coordinator, learner only)
                                <ns>.res.<name>       resource versions
                                <ns>.run.<run>        training-run events
                                <ns>.wk.<worker>      worker status
                                <ns>.gw.<gateway>     gateway pause / resume
    spans stream    <NS>_SPANS  <ns>.sp.<shard>       spans, model calls, rewards, heartbeats
    counters        <NS>_SEQ    <ns>.seq.<rollout>    per-rollout span sequence counters
    advisories      <NS>_ADV    max-deliveries advisories of the dispatch consumer (dead letters)
    snapshots       OBJ_<ns>-snapshots  object store: the coordinator's latest snapshot (a cache)
"""

from __future__ import annotations

import typing
import zlib

import msgspec

from .base import is_token
from .errors import InvalidId
from .events import AnyEvent
from .gateway import GatewayPaused, GatewayResumed
from .resources import ResourcesPublished
from .rollouts import (
    AttemptMarkedUnresponsive,
    AttemptTimedOut,
    RolloutCancelled,
    RolloutEvent,
    RolloutFailed,
    RolloutQueued,
    RolloutRequeued,
    RolloutUpdated,
)
from .spans import AttemptHeartbeatSent, ModelCalled, RewardReported, SpanBatch, SpanRecorded
from .training import CheckpointSaved, RunFinished, RunStarted, StepCompleted, StepStarted
from .workers import WorkerStatusReported

_ROLLOUT_EVENTS: tuple[type, ...] = typing.get_args(RolloutEvent)


def check_token(kind: str, value: str) -> str:
    """Return ``value`` if it can be a subject token, else raise :class:`InvalidId`.

    >>> check_token("rollout id", "ro-1")
    'ro-1'
    """
    if not is_token(value):
        raise InvalidId(kind, value)
    return value


WHOLE_STREAM = ">"
"""The consumer filter that reads a whole stream. A stream holds its namespace's subjects only, and the server creates
a consumer on ``>`` at once, where a filter such as ``vb.>`` makes it match every subject the stream holds first:
4.5 s on a control stream of 1,000,000 rollouts (2,000,000 subjects), past a client's request timeout under load."""


class Topology(msgspec.Struct, frozen=True, kw_only=True):
    """Stream and subject names for one namespace.

    >>> t = Topology(namespace="vb")
    >>> t.control_stream, t.rollout_queue("r1"), t.rollout_any("r1")
    ('VB_CTRL', 'vb.ro.r1.q', 'vb.ro.r1.*')
    >>> t.span_shard("r1") == t.span_shard("r1")
    True
    """

    namespace: str = "vb"
    """Subject prefix; stream names are its upper-case form plus a suffix."""
    span_shards: int = 64
    """Number of span subjects; each rollout maps to one by a stable hash."""

    def __post_init__(self) -> None:
        check_token("namespace", self.namespace)

    @property
    def control_stream(self) -> str:
        """The durable source-of-truth stream."""
        return f"{self.namespace.upper().replace('-', '_')}_CTRL"

    @property
    def spans_stream(self) -> str:
        """The high-volume telemetry stream."""
        return f"{self.namespace.upper().replace('-', '_')}_SPANS"

    @property
    def counters_stream(self) -> str:
        """The per-rollout counter stream (span sequence ids)."""
        return f"{self.namespace.upper().replace('-', '_')}_SEQ"

    @property
    def advisories_stream(self) -> str:
        """The stream that keeps the dispatch consumer's max-deliveries advisories."""
        return f"{self.namespace.upper().replace('-', '_')}_ADV"

    @property
    def snapshots_bucket(self) -> str:
        """The object store of the coordinator's snapshots (a cache of its fold, never a source of truth)."""
        return f"{self.namespace}-snapshots"

    @property
    def snapshots_stream(self) -> str:
        """The stream that holds ``snapshots_bucket``."""
        return f"OBJ_{self.snapshots_bucket}"

    @property
    def dispatch_consumer(self) -> str:
        """Durable name of the runners' shared dispatch consumer."""
        return f"{self.namespace}-dispatch"

    def group_dispatch_consumer(self, group: str) -> str:
        """Durable name of a runner group's own dispatch consumer (``""``: the shared one).

        >>> Topology().group_dispatch_consumer("trainer-1a2b"), Topology().group_dispatch_consumer("")
        ('vb-dispatch-g-trainer-1a2b', 'vb-dispatch')
        """
        return f"{self.dispatch_consumer}-g-{check_token('runner group', group)}" if group else self.dispatch_consumer

    @property
    def max_deliveries_subject(self) -> str:
        """Advisory subject the server publishes when a dispatch message hits its max deliveries."""
        return f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{self.control_stream}.{self.dispatch_consumer}"

    def counter(self, rollout_id: str) -> str:
        """Counter subject of a rollout's span sequence ids."""
        return f"{self.namespace}.seq.{check_token('rollout id', rollout_id)}"

    @property
    def control_subjects(self) -> list[str]:
        """Subjects captured by the control stream."""
        ns = self.namespace
        rollouts = [f"{ns}.ro.*.q", f"{ns}.ro.*.e", f"{ns}.ro.*.c"]
        return [*rollouts, f"{ns}.res.*", f"{ns}.run.*", f"{ns}.wk.*", f"{ns}.gw.*"]

    @property
    def spans_subjects(self) -> list[str]:
        """Subjects captured by the spans stream."""
        return [f"{self.namespace}.sp.*"]

    @property
    def dispatchable(self) -> str:
        """Filter of the runners' dispatch consumer: queued and requeued rollouts."""
        return f"{self.namespace}.ro.*.q"

    @property
    def every_rollout(self) -> str:
        """Wildcard over every rollout's subjects (queue, own events, ends by authority)."""
        return f"{self.namespace}.ro.*.*"

    @property
    def rollout_origins(self) -> list[str]:
        """Wildcards over the subjects a rollout's first event lands on: ``.q`` (queued) or ``.e`` (started, bypassing
        the queue); every rollout has one of them, and ``.c`` (ends by authority) never comes first.

        >>> Topology().rollout_origins
        ['vb.ro.*.q', 'vb.ro.*.e']
        """
        return [self.dispatchable, f"{self.namespace}.ro.*.e"]

    @property
    def every_resources(self) -> str:
        """Wildcard over every resources bundle's subject (one per bundle, whatever its versions)."""
        return f"{self.namespace}.res.*"

    @property
    def every_worker(self) -> str:
        """Wildcard over every worker's subject."""
        return f"{self.namespace}.wk.*"

    def rollout_queue(self, rollout_id: str) -> str:
        """Subject of a rollout's dispatchable events."""
        return f"{self.namespace}.ro.{check_token('rollout id', rollout_id)}.q"

    def rollout_events(self, rollout_id: str) -> str:
        """Subject of a rollout's other lifecycle events."""
        return f"{self.namespace}.ro.{check_token('rollout id', rollout_id)}.e"

    def rollout_authority(self, rollout_id: str) -> str:
        """Subject of a rollout's ends by authority (no runner may publish there when the bus has users)."""
        return f"{self.namespace}.ro.{check_token('rollout id', rollout_id)}.c"

    def rollout_any(self, rollout_id: str) -> str:
        """Wildcard over all of a rollout's subjects: the scope of its optimistic concurrency."""
        return f"{self.namespace}.ro.{check_token('rollout id', rollout_id)}.*"

    def resources(self, name: str) -> str:
        """Subject of one named resources bundle's versions."""
        return f"{self.namespace}.res.{check_token('resources name', name)}"

    def run(self, run_id: str) -> str:
        """Subject of one training run's events."""
        return f"{self.namespace}.run.{check_token('run id', run_id)}"

    def worker(self, worker_id: str) -> str:
        """Subject of one worker's status events."""
        return f"{self.namespace}.wk.{check_token('worker id', worker_id)}"

    def gateway(self, gateway_id: str) -> str:
        """Subject of one gateway's pause and resume events."""
        return f"{self.namespace}.gw.{check_token('gateway id', gateway_id)}"

    def span_shard(self, rollout_id: str) -> str:
        """Span subject of a rollout: a stable hash of its id modulo the shard count."""
        shard = zlib.crc32(rollout_id.encode()) % self.span_shards
        return f"{self.namespace}.sp.{shard}"


def subject_for(topology: Topology, event: AnyEvent) -> str:
    """The subject an event is appended to.

    >>> from voltbus.schemas.rollouts import AttemptStarted
    >>> subject_for(Topology(), AttemptStarted(event_id="e", rollout_id="r1", attempt_id="a", at=0))
    'vb.ro.r1.e'
    """
    match event:
        case RolloutQueued() | RolloutRequeued():
            return topology.rollout_queue(event.rollout_id)
        case RolloutCancelled() | RolloutUpdated():
            return topology.rollout_authority(event.rollout_id)
        case AttemptTimedOut() | AttemptMarkedUnresponsive() | RolloutFailed() if event.holder_sig is None:
            return topology.rollout_authority(event.rollout_id)  # signed: its attempt's holder ended it (``.e``)
        case _ if isinstance(event, _ROLLOUT_EVENTS):
            return topology.rollout_events(event.rollout_id)
        case ResourcesPublished():
            return topology.resources(event.name)
        case RunStarted() | StepStarted() | StepCompleted() | CheckpointSaved() | RunFinished():
            return topology.run(event.run_id)
        case WorkerStatusReported():
            return topology.worker(event.worker_id)
        case GatewayPaused() | GatewayResumed():
            return topology.gateway(event.gateway_id)
        case SpanRecorded() | ModelCalled() | RewardReported() | AttemptHeartbeatSent():
            return topology.span_shard(event.rollout_id)
        case SpanBatch():  # its events share one shard subject (EventLog.publish_spans groups them so)
            return topology.span_shard(event.events[0].rollout_id)
        case _:
            raise TypeError(f"not a voltbus event: {event!r}")


def aggregate_of(event: AnyEvent) -> str | None:
    """The rollout id of a rollout lifecycle event (its OCC aggregate), else None.

    >>> from voltbus.schemas.training import RunFinished
    >>> aggregate_of(RunFinished(event_id="e", run_id="run-1", status="succeeded", at=0)) is None
    True
    """
    return event.rollout_id if isinstance(event, _ROLLOUT_EVENTS) else None
