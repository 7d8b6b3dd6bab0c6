"""Backup and restore of a namespace's streams through JetStream's own snapshot API.

A backup is a directory: one ``<stream>.snap`` file per stream (the server's snapshot, an
s2-compressed tar of the stream's store and its consumers, byte for byte) and ``manifest.json``
written last (format, namespace, and per stream its config, state, size and sha256). A restore
checks every file against the manifest before it touches the bus, then asks the server to rebuild
each stream from its snapshot: sequences, subjects, headers, payloads and server timestamps come
back exactly, so a replay of the restored log builds the same projections.

nats-py has no client for ``$JS.API.STREAM.SNAPSHOT`` / ``RESTORE``; the protocol used here (as the
Go client's ``jsm.go`` speaks it): the snapshot request names a deliver subject; the server sends
chunks there, each with a reply subject to acknowledge it (flow control), and ends with an empty
message (a status header other than 204 is an error). A restore request returns a subject; each
chunk is sent to it as a request, and an empty request ends it and returns the stream's info.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
from pathlib import Path

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import Header

from voltbus.schemas.errors import VoltbusError
from voltbus.schemas.subjects import Topology
from voltbus.services.eventlog import unsubscribe
from voltbus.services.progress import Meter, Say

FORMAT = "voltbus-backup/1"
MANIFEST = "manifest.json"
CHUNK = 128 * 1024
"""Bytes per snapshot or restore chunk (below every server's max_payload)."""


class BackupError(VoltbusError):
    """A backup could not be written, or a restore was refused (corrupt files, streams not empty)."""


def stream_names(topology: Topology, found: list[str]) -> list[str]:
    """The streams of a namespace among ``found``: the topology's four, then its weights object store.

    >>> stream_names(Topology(namespace="vb"), ["VB_SPANS", "OBJ_vb-weights", "VB_CTRL", "OTHER", "OBJ_vb-x-weights"])
    ['VB_CTRL', 'VB_SPANS', 'OBJ_vb-weights']
    """
    t = topology
    own = [t.control_stream, t.spans_stream, t.counters_stream, t.advisories_stream, f"OBJ_{t.namespace}-weights"]
    return [s for s in own if s in found]


async def _api(nc: Client, subject: str, body: dict[str, object] | None, timeout: float) -> dict[str, object]:
    reply = await nc.request(f"$JS.API.{subject}", json.dumps(body).encode() if body else b"", timeout=timeout)
    answer = json.loads(reply.data)
    if "error" in answer:
        raise BackupError(f"{subject}: {answer['error'].get('description', answer['error'])}")
    return answer


async def list_streams(nc: Client, timeout: float) -> list[str]:
    """Every stream name on the server."""
    names: list[str] = []
    while True:
        page = await _api(nc, "STREAM.NAMES", {"offset": len(names)}, timeout)
        names += page.get("streams") or []  # type: ignore[operator]
        if not page.get("streams") or len(names) >= int(page.get("total", 0)):  # type: ignore[call-overload]
            return names


async def snapshot_stream(nc: Client, stream: str, target: Path, meter: Meter, timeout: float) -> dict[str, object]:
    """Write ``stream``'s snapshot to ``target``; return its manifest entry (config, state, size, sha256)."""
    chunks: asyncio.Queue[Msg] = asyncio.Queue()
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, cb=chunks.put)
    digest, size = hashlib.sha256(), 0
    try:
        request = {"deliver_subject": inbox, "chunk_size": CHUNK, "jsck": True}
        answer = await _api(nc, f"STREAM.SNAPSHOT.{stream}", request, timeout)
        partial = target.with_suffix(".part")
        with partial.open("wb") as out:
            while True:
                msg = await asyncio.wait_for(chunks.get(), timeout)
                if not msg.data:
                    status = (msg.headers or {}).get(Header.STATUS, "")
                    if status and status != "204":
                        raise BackupError(f"snapshot of {stream} failed: {status} {msg.headers}")
                    break
                out.write(msg.data)
                digest.update(msg.data)
                size += len(msg.data)
                meter.add(len(msg.data))
                if msg.reply:
                    await nc.publish(msg.reply, b"")
        partial.replace(target)
    finally:
        await unsubscribe(sub)
    state = answer["state"]
    return {
        "name": stream,
        "file": target.name,
        "bytes": size,
        "sha256": digest.hexdigest(),
        "config": answer["config"],
        "state": state,
    }


def _prepare(to: Path) -> None:
    if (to / MANIFEST).exists():
        raise BackupError(f"{to} already holds a backup ({MANIFEST}); choose an empty directory")
    to.mkdir(parents=True, exist_ok=True)


async def backup(nc: Client, topology: Topology, to: Path, say: Say, timeout: float = 30.0) -> dict[str, object]:
    """Snapshot every stream of ``topology``'s namespace into ``to``; return the manifest."""
    _prepare(to)
    names = stream_names(topology, await list_streams(nc, timeout))
    if not names:
        raise BackupError(f"namespace {topology.namespace!r} has no streams on this server")
    sizes = {n: int((await _api(nc, f"STREAM.INFO.{n}", None, timeout))["state"]["bytes"]) for n in names}  # type: ignore[index]
    meter = Meter("backup", sum(sizes.values()), say, unit="MB", scale=1e6, upper_bound=True)
    say(f"backup: {len(names)} streams ({', '.join(names)}), {meter.total / 1e6:,.1f} MB stored, into {to}")
    entries = [await snapshot_stream(nc, n, to / f"{n}.snap", meter, timeout) for n in names]
    manifest = {
        "format": FORMAT,
        "namespace": topology.namespace,
        "created_at": dt.datetime.now(dt.UTC).isoformat(),
        "server": repr(nc.connected_server_version),
        "streams": entries,
    }
    (to / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    messages = sum(int(e["state"]["messages"]) for e in entries)  # type: ignore[index]
    say(
        f"backed up {len(entries)} streams, {messages:,} messages, {sum(int(e['bytes']) for e in entries) / 1e6:,.1f}"  # type: ignore[call-overload]
        f" MB in {meter.elapsed():.1f}s -> {to / MANIFEST}"
    )
    return manifest
