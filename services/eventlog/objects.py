"""Files kept in the bus: a JetStream object store per namespace (``<ns>-weights``), for policy weights
small enough to travel through NATS, so a learner and inference servers on different machines share
no filesystem. An object is named by the caller and referenced as ``nats-obj://<bucket>/<name>``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from pathlib import Path

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import ObjectStoreConfig, StorageType
from nats.js.errors import NotFoundError

from voltbus.schemas.errors import PublishFailed, VoltbusError

SCHEME = "nats-obj://"
RETRY_S = 0.5
"""Pause before a put is made again."""
AWAY = (
    TimeoutError,
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionReconnectingError,
    nats.js.errors.ServiceUnavailableError,
)
"""What a put raises while the bus is away or restarting."""
log = logging.getLogger(__name__)


class ObjectMissing(VoltbusError):
    """An object reference names nothing the bus holds (or its digest does not match)."""


def object_uri(bucket: str, name: str) -> str:
    """The reference of an object.

    >>> object_uri("vb-weights", "run-1/step-3.safetensors")
    'nats-obj://vb-weights/run-1/step-3.safetensors'
    """
    return f"{SCHEME}{bucket}/{name}"


def parse_uri(uri: str) -> tuple[str, str]:
    """(bucket, name) of an object reference; ValueError for anything else.

    >>> parse_uri("nats-obj://vb-weights/run-1/step-3.safetensors")
    ('vb-weights', 'run-1/step-3.safetensors')
    """
    if not uri.startswith(SCHEME) or "/" not in uri[len(SCHEME) :]:
        raise ValueError(f"not an object reference: {uri!r} (expected {SCHEME}<bucket>/<name>)")
    bucket, _, name = uri[len(SCHEME) :].partition("/")
    return bucket, name


async def put_file(
    js: JetStreamContext, bucket: str, name: str, path: Path | bytes, replicas: int = 1, retries: int = 0
) -> str:
    """Store ``path`` (a file, or bytes already in memory) as object ``name`` (the bucket, with
    ``replicas`` copies, is created if needed); returns its reference. A put the bus does not acknowledge
    (a server restarting under it) is made again, whole, up to ``retries`` times: a put replaces the object."""
    for attempt in range(retries + 1):
        try:
            await _put(js, bucket, name, path, replicas)
            return object_uri(bucket, name)
        except AWAY as exc:
            if attempt == retries:
                raise PublishFailed([name], f"object {name} not stored after {retries + 1} tries: {exc!r}") from exc
            log.warning("object %s: %r (try %d), storing it again", name, exc, attempt + 1)
            await asyncio.sleep(RETRY_S)  # a pause for the bus to come back, not a synchronization
    raise AssertionError("unreachable")


async def _put(js: JetStreamContext, bucket: str, name: str, path: Path | bytes, replicas: int) -> None:
    try:
        store = await js.object_store(bucket)
    except NotFoundError:
        store = await js.create_object_store(
            bucket, ObjectStoreConfig(bucket=bucket, storage=StorageType.FILE, replicas=replicas)
        )
    if isinstance(path, bytes):
        await store.put(name, path)
    else:
        with path.open("rb") as f:
            await store.put(name, f)


async def fetch_file(js: JetStreamContext, uri: str, cache: Path, sha256: str, suffix: str = ".safetensors") -> Path:
    """A local copy of an object, kept in ``cache`` under its digest (fetched once); checked against it."""
    target = cache / f"{sha256}{suffix}"
    if target.is_file():
        return target
    bucket, name = parse_uri(uri)
    try:
        result = await (await js.object_store(bucket)).get(name)
    except NotFoundError:
        raise ObjectMissing(f"{uri}: no such object in the bus") from None
    data = result.data or b""
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ObjectMissing(f"{uri}: its sha256 is not {sha256}")
    await asyncio.to_thread(_save, target, data)
    return target


def _save(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".part")
    partial.write_bytes(data)
    partial.replace(target)  # whole or absent: a reader never sees half a file
