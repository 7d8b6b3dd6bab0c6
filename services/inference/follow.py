"""Following the bus: serve the weights of each new resources version that names the served model.

The follower reads the stored resources versions once (direct get over ``<ns>.res.*``), serves the
newest one that names this model, then follows the control stream on the same subjects (an ordered
replay in follow mode). A version counts when one of its resources is an ``LLM`` (or ``ProxyLLM``)
whose ``model`` is the served model name and that has ``weights``; the weights file must match its
sha256, and the version label becomes the bundle's ``resources_id`` (``default:3``). Same digest as
now: only the label changes. A bad version (missing file, wrong digest) is logged and skipped.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import tempfile
from pathlib import Path

from transformers import PreTrainedModel

from voltbus.schemas.resources import LLM, ResourcesPublished, WeightsRef
from voltbus.services.clients.model import shards
from voltbus.services.eventlog import Envelope, EventLog
from voltbus.services.eventlog.objects import SCHEME
from voltbus.services.restart import supervised
from voltbus.services.settings import Settings

from .swap import Weights, swap

log = logging.getLogger(__name__)


def weights_for(event: object, model_name: str) -> WeightsRef | None:
    """The weights a resources version names for ``model_name``, if it is such a version."""
    if not isinstance(event, ResourcesPublished):
        return None
    for resource in event.resources.values():
        if isinstance(resource, LLM) and resource.model == model_name and resource.weights is not None:
            return resource.weights
    return None


async def serve_version(
    model: PreTrainedModel, weights: Weights, event: ResourcesPublished, ref: WeightsRef, eventlog: EventLog
) -> None:
    """Swap to a version's weights: a file path, or an object in the bus (``nats-obj://``), fetched into
    a scratch directory that is gone once the weights are loaded (no copy per version piles up)."""
    try:
        if not ref.uri.startswith(SCHEME):
            await swap(model, weights, ref.uri, event.resources_id, ref.sha256)
            return
        with tempfile.TemporaryDirectory(prefix="voltbus-weights-") as scratch:
            suffix = ".tar" if ref.uri.endswith(".tar") else ".safetensors"  # .tar: a sharded set (shards.pack)
            path = await eventlog.fetch_weights(ref.uri, Path(scratch), ref.sha256, suffix)
            if suffix == ".tar":
                path = await asyncio.to_thread(shards.unpack, path, Path(scratch) / "shards")
            await swap(model, weights, path, event.resources_id, ref.sha256)
    except Exception as exc:
        log.error("not serving resources %s: %s", event.resources_id, exc)


async def follow_resources(settings: Settings, model: PreTrainedModel, weights: Weights, model_name: str) -> None:
    """Serve each matching resources version as it is published; runs until cancelled."""
    eventlog = await EventLog.connect(settings.nats, name="voltbus-inference")
    subject = f"{eventlog.topology.namespace}.res.*"
    try:
        stored, last = await eventlog.read_subject(subject)
        matching = [
            (e.event, ref) for e in stored if isinstance(e, Envelope) and (ref := weights_for(e.event, model_name))
        ]
        if matching:
            await serve_version(model, weights, *matching[-1], eventlog)  # type: ignore[arg-type]
        log.info("following resources on %s for model %s from sequence %d", subject, model_name, last + 1)
        async for item in eventlog.replay("control", from_seq=last + 1, follow=True, subject=subject):
            event = getattr(item, "event", None)
            if (ref := weights_for(event, model_name)) is not None:
                await serve_version(model, weights, event, ref, eventlog)  # type: ignore[arg-type]
    finally:
        await eventlog.close()


async def follow_forever(settings: Settings, model: PreTrainedModel, weights: Weights, model_name: str) -> None:
    """``follow_resources``, started again after a failure (the bus went away, a stream was recreated)."""
    body = functools.partial(follow_resources, settings, model, weights, model_name)
    await supervised("resources follower", body, settings.inference.restart_delay_s, log)
