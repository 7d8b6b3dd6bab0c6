"""Store methods for resources: immutable versions of named bundles on ``<ns>.res.<id>``.

A bundle keeps Agent Lightning's ``resources_id``; every update is a new version appended with
optimistic concurrency, never a change in place. A rollout pins ``<id>:<version>``, so the exact
version it ran with stays readable.
"""

from __future__ import annotations

import time

from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from voltbus.schemas import codec
from voltbus.schemas.base import derive_id
from voltbus.schemas.errors import ConcurrencyConflict, DecodeError
from voltbus.schemas.resources import ResourcesPublished
from voltbus.services.eventlog import Envelope

from .base import StoreBase, new_id
from .types import NamedResources, ResourcesUpdate
from .views import resources_view

VERSION_SEP = ":"
LATEST_RECHECK_S = 2.0
"""How stale the latest version new rollouts default to may get if the watch on it stops delivering."""
"""Separates a bundle id from a version in a pinned resources id (``rs-1a2b:3``)."""


def pinned(event: ResourcesPublished) -> str:
    """The id a rollout records for this exact version."""
    return f"{event.name}{VERSION_SEP}{event.version}"


class ResourceMethods(StoreBase):
    """Publishing and reading resource versions."""

    _latest: tuple[int, ResourcesPublished | None] | None = None
    """(stream sequence, event) of the newest resources version, once ``_latest_resources_id`` watches."""
    _latest_watch: object | None = None
    _latest_read: float = 0.0
    """When the newest version was last read from the stream (the watch is re-checked every few seconds)."""

    async def _versions(self, name: str) -> list[ResourcesPublished]:
        return (await self._versions_at(name))[0]

    async def _versions_at(self, name: str) -> tuple[list[ResourcesPublished], int]:
        envelopes, last = await self.log.read_subject(self.topology.resources(name))
        return [e.event for e in envelopes if isinstance(e, Envelope) and isinstance(e.event, ResourcesPublished)], last

    async def _publish(self, name: str, resources: NamedResources) -> ResourcesUpdate:
        for _ in range(self.settings.conflict_retries + 1):
            versions, head = await self._versions_at(name)
            version = len(versions) + 1
            now = self.clock()
            event = ResourcesPublished(
                event_id=derive_id(name, "v", version, repr(now)),
                resources_id=f"{name}{VERSION_SEP}{version}",
                name=name,
                version=version,
                resources=dict(resources),
                created_at=now,
            )
            try:
                ack = await self.log.append([event], expected_seq=head)
            except ConcurrencyConflict:
                continue
            self._saw_version(ack.seq, event)
            created = versions[0].created_at if versions else now
            return resources_view(event, created)
        raise ConcurrencyConflict(self.topology.resources(name), 0, None)

    async def add_resources(self, resources: NamedResources) -> ResourcesUpdate:
        """Publish a new bundle (version 1) under a fresh id; it becomes the latest."""
        return await self._publish(new_id("rs", 8), resources)

    async def update_resources(self, resources_id: str, resources: NamedResources) -> ResourcesUpdate:
        """Publish the next version of a bundle (version 1 if it is new); it becomes the latest."""
        return await self._publish(resources_id.split(VERSION_SEP)[0], resources)

    async def get_resources_by_id(self, resources_id: str) -> ResourcesUpdate | None:
        """A bundle's latest version, or the exact version for a pinned id (``rs-…:3``). Pinned versions
        never change, so they are kept once read (every rollout of a batch asks for the same one)."""
        name, _, version = resources_id.partition(VERSION_SEP)
        pinned_cache = self._pinned_resources
        if version and resources_id in pinned_cache:
            return pinned_cache[resources_id]
        versions = await self._versions(name)
        if not versions:
            return None
        chosen = versions[-1] if not version else next((v for v in versions if str(v.version) == version), None)
        found = resources_view(chosen, versions[0].created_at) if chosen else None
        if version and found is not None:
            if len(pinned_cache) >= 1024:
                pinned_cache.clear()
            pinned_cache[resources_id] = found
        return found

    async def resources_history(self, resources_id: str) -> list[ResourcesUpdate]:
        """voltbus addition: every version of a bundle, oldest first."""
        versions = await self._versions(resources_id.split(VERSION_SEP)[0])
        return [resources_view(v, versions[0].created_at) for v in versions]

    async def _latest_event(self) -> ResourcesPublished | None:
        return (await self._latest_event_at())[0]

    async def _latest_event_at(self) -> tuple[ResourcesPublished | None, int]:
        try:
            raw = await self.log.js.get_last_msg(
                self.topology.control_stream, f"{self.topology.namespace}.res.*", direct=True
            )
        except NotFoundError:
            return None, 0
        event = codec.decode_control(raw.data or b"")
        return (event if isinstance(event, ResourcesPublished) else None), raw.seq

    def _saw_version(self, seq: int, event: ResourcesPublished) -> None:
        """Keep the newest resources version seen (by stream sequence) once the watch is on."""
        if self._latest is not None and seq > self._latest[0]:
            self._latest = (seq, event)

    async def _watch_versions(self, msg: Msg) -> None:
        try:
            event = codec.decode_control(msg.data)
        except DecodeError:
            return
        if isinstance(event, ResourcesPublished):
            self._saw_version(msg.metadata.sequence.stream, event)

    async def get_latest_resources(self) -> ResourcesUpdate | None:
        """The most recently published version of any bundle, or None."""
        event = await self._latest_event()
        return None if event is None else await self.get_resources_by_id(pinned(event))

    async def _latest_resources_id(self) -> str | None:
        """The pinned id new rollouts get when they name no resources. Read once; from then on a
        subscription to the stored versions keeps it current, so an enqueue needs no read. A version
        this client publishes counts at once; another client's, as soon as the bus delivers it
        (about a round trip later: an enqueue racing it may get the version before)."""
        if self._latest is None:
            event, seq = await self._latest_event_at()
            if self._latest is not None:  # another call started the watch meanwhile
                return await self._latest_resources_id()
            self._latest = (seq, event)  # the watch delivers from the next version on
            self._latest_read = time.monotonic()
            try:
                self._latest_watch = await self.log.js.subscribe(
                    f"{self.topology.namespace}.res.*",
                    stream=self.topology.control_stream,
                    ordered_consumer=True,
                    deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                    config=ConsumerConfig(opt_start_seq=seq + 1),
                    cb=self._watch_versions,
                )
            except BaseException:
                self._latest = None  # no watch: read again next time
                raise
        elif time.monotonic() - self._latest_read > LATEST_RECHECK_S:  # the watch may have died silently
            self._latest_read = time.monotonic()  # (an ordered consumer lost in a server restart): re-read
            event, seq = await self._latest_event_at()
            if event is not None:
                self._saw_version(seq, event)
        event = self._latest[1]
        return pinned(event) if event else None
