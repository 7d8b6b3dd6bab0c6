"""Stream setup: the control and spans streams as DESIGN.md specifies them, created idempotently.

An existing stream whose settings would break our guarantees (history that can vanish, no dedup
window, no optimistic concurrency) is refused with the name of the offending setting.
"""

from __future__ import annotations

import dataclasses
import logging

from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    PersistMode,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import NotFoundError

from voltbus.schemas.errors import StreamConfigMismatch
from voltbus.schemas.subjects import Topology

from ..settings import NatsSettings

log = logging.getLogger(__name__)


def topology_of(settings: NatsSettings) -> Topology:
    """The stream and subject names for these settings."""
    return Topology(namespace=settings.namespace, span_shards=settings.span_shards)


def control_config(settings: NatsSettings) -> StreamConfig:
    """The source-of-truth stream: durable, append-only, deduplicated, OCC and atomic batches."""
    topo = topology_of(settings)
    return StreamConfig(
        name=topo.control_stream,
        description="voltbus control events: rollouts, attempts, resources, runs, workers",
        subjects=topo.control_subjects,
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        discard=DiscardPolicy.NEW,
        max_bytes=settings.control_max_bytes,
        max_msg_size=settings.max_payload,
        duplicate_window=settings.dedup_window_s,
        deny_delete=True,
        deny_purge=True,
        allow_direct=True,
        allow_atomic=True,
        num_replicas=settings.replicas,
    )


def spans_config(settings: NatsSettings) -> StreamConfig:
    """The telemetry stream: sharded subjects, asynchronous persistence (single server, unless
    ``spans_sync``), dedup by event id."""
    topo = topology_of(settings)
    return StreamConfig(
        name=topo.spans_stream,
        description="voltbus telemetry: spans, model calls, rewards, heartbeats",
        subjects=topo.spans_subjects,
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        discard=DiscardPolicy.NEW,
        max_bytes=settings.spans_max_bytes,
        max_msg_size=settings.max_payload,
        duplicate_window=settings.spans_dedup_window_s,
        deny_delete=True,
        deny_purge=True,
        allow_direct=True,
        # the server refuses async on replicas; spans_sync: fsynced like control
        persist_mode=PersistMode.ASYNC if settings.replicas == 1 and not settings.spans_sync else None,
        num_replicas=settings.replicas,
    )


def counters_config(settings: NatsSettings) -> StreamConfig:
    """Per-rollout counters (span sequence ids): a counter stream, one subject per rollout."""
    topo = topology_of(settings)
    return StreamConfig(
        name=topo.counters_stream,
        description="voltbus per-rollout span sequence counters",
        subjects=[f"{topo.namespace}.seq.*"],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        allow_msg_counter=True,
        allow_direct=True,
        num_replicas=settings.replicas,
    )


def advisories_config(settings: NatsSettings) -> StreamConfig:
    """Keeps the dispatch consumer's max-deliveries advisories until the coordinator parks them."""
    topo = topology_of(settings)
    return StreamConfig(
        name=topo.advisories_stream,
        description="voltbus dead letters: dispatch messages past their max deliveries",
        subjects=[topo.max_deliveries_subject],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        discard=DiscardPolicy.NEW,
        deny_delete=True,
        deny_purge=True,
        num_replicas=settings.replicas,
    )


def dispatch_config(settings: NatsSettings) -> ConsumerConfig:
    """The runners' shared durable pull consumer on the dispatchable subjects, FIFO."""
    topo = topology_of(settings)
    return ConsumerConfig(
        durable_name=topo.dispatch_consumer,
        filter_subject=topo.dispatchable,
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=settings.dispatch_ack_wait_s,
        max_deliver=settings.dispatch_max_deliver,
        max_ack_pending=10_000,
    )


def group_dispatch_config(settings: NatsSettings, group: str) -> ConsumerConfig:
    """A runner group's own dispatch consumer: every dispatchable message from its creation on (its runners
    claim their group's rollouts; the claim of any other is refused), removed after an hour unused."""
    wanted = dispatch_config(settings)
    wanted.durable_name = topology_of(settings).group_dispatch_consumer(group)
    wanted.deliver_policy = DeliverPolicy.NEW
    wanted.inactive_threshold = 3600.0
    return wanted


def _mismatch(found: StreamConfig, wanted: StreamConfig, subjects: bool = True) -> tuple[str, object, object] | None:
    """The first setting of ``found`` that breaks what ``wanted`` guarantees, if any (``subjects``: check
    that every wanted subject is captured)."""
    for name in ("retention", "storage", "discard"):
        if getattr(found, name) != getattr(wanted, name):
            return name, getattr(found, name), getattr(wanted, name)
    for name in ("deny_delete", "deny_purge", "allow_direct", "allow_msg_counter"):
        if bool(getattr(found, name)) != bool(getattr(wanted, name)):
            return name, bool(getattr(found, name)), bool(getattr(wanted, name))
    if wanted.allow_atomic and not found.allow_atomic:
        return "allow_atomic", found.allow_atomic, True
    replicated = (found.num_replicas or 1) > 1 or (wanted.num_replicas or 1) > 1  # async needs one replica
    if not replicated and (found.persist_mode or PersistMode.DEFAULT) != (wanted.persist_mode or PersistMode.DEFAULT):
        return "persist_mode", found.persist_mode, wanted.persist_mode
    if found.duplicate_window < wanted.duplicate_window:
        return "duplicate_window", found.duplicate_window, wanted.duplicate_window
    for name in ("max_age", "max_msgs", "max_msgs_per_subject"):
        if getattr(found, name) not in (None, 0, -1):
            return name, getattr(found, name), "unlimited"
    missing = sorted(set(wanted.subjects or []) - set(found.subjects or []))
    if subjects and missing:
        return "subjects", found.subjects, wanted.subjects
    return None


async def ensure_stream(js: JetStreamContext, wanted: StreamConfig) -> bool:
    """Create ``wanted`` if absent (returns True), accept a compatible one, refuse an incompatible one."""
    assert wanted.name is not None
    try:
        info = await js.stream_info(wanted.name)
    except NotFoundError:
        await js.add_stream(wanted)
        log.info("created stream %s subjects=%s", wanted.name, wanted.subjects)
        return True
    problem = _mismatch(info.config, wanted)
    if problem and problem[0] == "subjects" and _mismatch(info.config, wanted, subjects=False) is None:
        await _add_subjects(js, info.config, wanted)  # a newer version captures more subjects: additive, safe
        return False
    if problem:
        raise StreamConfigMismatch(wanted.name, *problem)
    if (wanted.num_replicas or 1) > (info.config.num_replicas or 1):
        await _scale_up(js, info.config, wanted.num_replicas or 1)
    return False


async def _scale_up(js: JetStreamContext, found: StreamConfig, replicas: int) -> None:
    """Give an existing stream more copies (the cluster copies its history). Never fewer: a client
    with the default of 1 leaves a replicated stream as it is."""
    if found.persist_mode == PersistMode.ASYNC:  # the server cannot change a stream's persist mode
        raise StreamConfigMismatch(found.name or "", "num_replicas", found.num_replicas, replicas)
    await js.update_stream(dataclasses.replace(found, num_replicas=replicas))
    log.warning("stream %s: replicas %s -> %s", found.name, found.num_replicas or 1, replicas)


async def _add_subjects(js: JetStreamContext, found: StreamConfig, wanted: StreamConfig) -> None:
    added = sorted(set(wanted.subjects or []) - set(found.subjects or []))
    await js.update_stream(dataclasses.replace(found, subjects=[*(found.subjects or []), *added]))
    log.warning("stream %s: added subjects %s (written by an older voltbus)", wanted.name, added)


async def ensure_consumer(js: JetStreamContext, stream: str, wanted: ConsumerConfig) -> None:
    """Create a durable consumer if absent; refuse one whose filter differs."""
    try:
        info = await js.consumer_info(stream, wanted.durable_name or "")
    except NotFoundError:
        await js.add_consumer(stream, wanted)
        return
    if info.config.filter_subject != wanted.filter_subject:
        raise StreamConfigMismatch(stream, "consumer filter_subject", info.config.filter_subject, wanted.filter_subject)


async def ensure_streams(js: JetStreamContext, settings: NatsSettings) -> list[str]:
    """Make sure every stream and the dispatch consumer exist with safe settings; return streams created now."""
    created = []
    wanted_all = (
        control_config(settings),
        spans_config(settings),
        counters_config(settings),
        advisories_config(settings),
    )
    for wanted in wanted_all:
        if await ensure_stream(js, wanted):
            created.append(wanted.name or "")
    await ensure_consumer(js, topology_of(settings).control_stream, dispatch_config(settings))
    return created
