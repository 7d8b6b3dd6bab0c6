"""Checkpoints a learner on another machine can resume from.

After each step the learner saves the version's directory (weights, optimizer state, config,
tokenizer: ``grpo/policy.py``). When that directory, packed as one tar file, fits in
``weights_in_bus_mb``, it is also stored in the bus's object store and the ``CheckpointSaved`` event
names it there (``nats-obj://<ns>-weights/<run>/checkpoint-<0|1>.tar`` with the tar's sha256); so a
learner restarted on a machine that never saw the first one's disk fetches, checks and unpacks it.
Two names alternate by step parity, so the checkpoint of the last completed step is never
overwritten by the step after it, and a run keeps two checkpoints in the bus, not one per step.
Larger checkpoints stay on the learner's disk and are named by their path.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import tarfile
from pathlib import Path

from voltbus.schemas.training import CheckpointSaved
from voltbus.services.eventlog.objects import SCHEME
from voltbus.services.settings import LearnerSettings

from .session import LearnerError, Session


def pack(folder: Path) -> bytes:
    """The directory as an uncompressed tar, with fixed metadata (equal folders give equal bytes)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for path in sorted(p for p in folder.iterdir() if p.is_file()):
            info = tarfile.TarInfo(path.name)
            info.size, info.mode = path.stat().st_size, 0o644
            with path.open("rb") as f:
                tar.addfile(info, f)
    return out.getvalue()


def _holds(folder: Path, sha256: str) -> bool:
    return folder.is_dir() and hashlib.sha256(pack(folder)).hexdigest() == sha256


def unpack(archive: Path, folder: Path) -> None:
    """Extract a ``pack``ed checkpoint into ``folder`` (plain files only)."""
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")


async def save(session: Session, settings: LearnerSettings, folder: Path, step: int, weights_sha: str) -> None:
    """Record the checkpoint of ``step`` (in the bus when it fits, else by its local path)."""
    data = await asyncio.to_thread(pack, folder)
    if len(data) > settings.weights_in_bus_mb * 1024 * 1024:
        await session.checkpoint(step, str(folder), weights_sha)
        return
    uri = await session.store.log.put_weights(f"{session.run_id}/checkpoint-{step % 2}.tar", data)
    await session.checkpoint(step, uri, hashlib.sha256(data).hexdigest())


async def local_copy(session: Session, settings: LearnerSettings, checkpoint: CheckpointSaved) -> Path:
    """A directory holding the checkpoint: its own path, or fetched from the bus and unpacked."""
    if not checkpoint.uri.startswith(SCHEME):
        folder = Path(checkpoint.uri)
        if not await asyncio.to_thread(folder.is_dir):
            raise LearnerError(f"checkpoint of step {checkpoint.step} is at {folder}, which this machine lacks")
        return folder
    folder = Path(settings.weights_dir) / session.run_id / f"step-{checkpoint.step}"
    if await asyncio.to_thread(_holds, folder, checkpoint.sha256):  # this machine wrote it
        return folder
    cache = Path(settings.weights_dir) / "cache"
    archive = await session.store.log.fetch_weights(checkpoint.uri, cache, checkpoint.sha256, suffix=".tar")
    await asyncio.to_thread(unpack, archive, folder)
    return folder
