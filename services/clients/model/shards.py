"""A model directory's weights, one ``model.safetensors`` or Hugging Face's shards (``model-0000k-of-0000n.safetensors``
named by ``model.safetensors.index.json``), and the one sha256 that names them: the file's, or for shards the
digest of the set packed as one tar (the index first, then the shards, sorted, fixed metadata): that tar is
also what the bus's object store holds for a sharded version.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import IO

import torch
from safetensors.torch import load_file

WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"


class ShardsError(ValueError):
    """A sharded directory whose index is unreadable or names a shard that is missing or outside it."""


def is_sharded(path: str | Path) -> bool:
    """Whether ``path`` is a shards' index, or a model directory with one and no ``model.safetensors``."""
    p = Path(path)
    return p.name == INDEX or (p.is_dir() and not (p / WEIGHTS).is_file() and (p / INDEX).is_file())


def weights_path(path: str | Path) -> Path:
    """A model directory's weights: ``model.safetensors``, or the shards' index; a file is itself."""
    p = Path(path)
    if not p.is_dir():
        return p
    return p / INDEX if is_sharded(p) else p / WEIGHTS


def shard_files(path: str | Path) -> list[Path]:
    """The files of a sharded set: its index, then each shard it names (sorted)."""
    index = weights_path(path)
    try:
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ShardsError(f"{index}: not a readable shards index ({exc})") from None
    bad = [n for n in names if not isinstance(n, str) or Path(n).name != n or n in {INDEX, ".", ".."}]
    if bad or not names:
        raise ShardsError(f"{index}: shard names must be plain file names beside it, found {bad[:3] or 'none'}")
    files = [index.parent / n for n in names]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise ShardsError(f"{index}: shards missing beside it: {missing[:3]}")
    return [index, *files]


def pack(path: str | Path, sink: IO[bytes]) -> None:
    """Write the sharded set as one tar stream (equal sets give equal bytes)."""
    with tarfile.open(fileobj=sink, mode="w|") as tar:
        for file in shard_files(path):
            info = tarfile.TarInfo(file.name)
            info.size, info.mode = file.stat().st_size, 0o644
            with file.open("rb") as f:
                tar.addfile(info, f)


def packed(path: str | Path) -> bytes:
    """The sharded set as one tar (what the bus stores for a sharded version)."""
    out = io.BytesIO()
    pack(path, out)
    return out.getvalue()


def unpack(archive: Path, folder: Path) -> Path:
    """Extract a ``pack``ed set into ``folder`` (plain files only); returns its index."""
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    return folder / INDEX


class _Digest(io.RawIOBase):
    def __init__(self) -> None:
        self.sha = hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.sha.update(data)
        return len(data)


def weights_sha256(path: str | Path) -> str:
    """The sha256 naming a version's weights: of the file, or of a sharded set packed (``pack``)."""
    if is_sharded(path):
        sink = _Digest()
        pack(path, sink)  # type: ignore[arg-type]
        return sink.sha.hexdigest()
    digest = hashlib.sha256()
    with weights_path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def weights_size(path: str | Path) -> int:
    """Bytes of the weights (all shards together)."""
    files = shard_files(path) if is_sharded(path) else [weights_path(path)]
    return sum(f.stat().st_size for f in files)


def save_state(state: dict[str, torch.Tensor], folder: Path, max_shard_bytes: int) -> Path:
    """Write ``state`` into ``folder`` as ``model.safetensors``, or above ``max_shard_bytes`` as shards and their
    index (Hugging Face's layout and names); returns the weights file (the index when sharded)."""
    from huggingface_hub import split_torch_state_dict_into_shards
    from safetensors.torch import save_file

    split = split_torch_state_dict_into_shards(state, max_shard_size=max_shard_bytes)
    for name, keys in split.filename_to_tensors.items():
        save_file({k: state[k] for k in keys}, folder / name, metadata={"format": "pt"})
        (folder / name).chmod(0o644)  # save_file writes 0600; inference servers may run as another user
    if not split.is_sharded:
        return folder / WEIGHTS
    index = {"metadata": {**split.metadata, "total_size": sum(t.numel() * t.element_size() for t in state.values())}}
    (folder / INDEX).write_text(json.dumps({**index, "weight_map": split.tensor_to_filename}, indent=2))
    (folder / INDEX).chmod(0o644)
    return folder / INDEX


def load_state(path: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of the weights (all shards merged)."""
    files = shard_files(path)[1:] if is_sharded(path) else [weights_path(path)]
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(file))
    return state
