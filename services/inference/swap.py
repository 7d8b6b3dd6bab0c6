"""The serving weights: their version label, the lock that keeps a batch on one version, and hot swaps.

A swap reads (and, given a digest, verifies) the new safetensors file (or shards) outside the lock, then loads
it into the model with ``load_state_dict`` under the lock: a batch in progress finishes on the old
weights, the next one starts on the new, and no sequence ever mixes two versions. A LoRA adapter's file
(``adapter.py``) is merged into the base it was trained on instead.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import PreTrainedModel

from voltbus.services.clients.model import shards

from .adapter import Adapter, AdapterError, from_state, merge, metadata

log = logging.getLogger(__name__)


class WeightsError(Exception):
    """Weights that cannot be served: missing file, wrong digest, wrong tensor names or shapes."""


@dataclass
class Weights:
    """The version label of the weights being served, guarded by ``lock``."""

    version: str
    sha256: str | None = None
    base_sha256: str | None = None
    """Digest of the full weights under the served ones (an adapter merges only into these)."""
    base: dict[str, torch.Tensor] = field(default_factory=dict)
    """Base values of the layers an adapter changed (empty while full weights are served)."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    swaps: int = 0
    last_error: str | None = None


def local_version(digest: str) -> str:
    """The label of weights that came from no resources version."""
    return f"local:{digest[:12]}"


def weights_file(path: str | Path) -> Path:
    """The weights file for ``path``: the file itself, or in a model directory ``model.safetensors`` or the index of
    its shards (``model.safetensors.index.json``)."""
    file = shards.weights_path(path.removeprefix("file://") if isinstance(path, str) else path)
    if not file.is_file():
        raise WeightsError(f"weights file not found: {file}")
    return file


def read_weights(path: str | Path, sha256: str | None = None) -> tuple[dict[str, torch.Tensor], str]:
    """The tensors of a weights file (or of all the shards an index names) and their digest (``shards.py``); with
    ``sha256`` given, a mismatch is an error."""
    file = weights_file(path)
    try:
        digest = shards.weights_sha256(file)
        if sha256 is not None and digest != sha256:
            raise WeightsError(f"sha256 of {file} is {digest}, expected {sha256}")
        return shards.load_state(file), digest
    except shards.ShardsError as exc:
        raise WeightsError(str(exc)) from None


def read_version(path: str | Path, sha256: str | None = None) -> tuple[dict[str, torch.Tensor] | Adapter, str]:
    """``read_weights``, or for a LoRA adapter's file its merged updates (``adapter.from_state``)."""
    state, digest = read_weights(path, sha256)
    meta = {} if shards.is_sharded(weights_file(path)) else metadata(weights_file(path))
    if "peft_config" not in meta:
        return state, digest
    try:
        return from_state(state, meta), digest
    except (AdapterError, KeyError, ValueError) as exc:
        raise WeightsError(f"adapter {path}: {exc}") from None


def apply_version(model: PreTrainedModel, weights: Weights, found: dict[str, torch.Tensor] | Adapter) -> None:
    """Serve full weights (``apply_state``; they become the base) or an adapter merged into the base."""
    if not isinstance(found, Adapter):
        apply_state(model, found)
        weights.base.clear()
        return
    if found.base_sha256 != weights.base_sha256:
        raise WeightsError(f"adapter for base weights {found.base_sha256[:12]}, served base is {weights.base_sha256}")
    try:
        merge(model, weights.base, found)
    except AdapterError as exc:
        raise WeightsError(str(exc)) from None


def check_state(model: PreTrainedModel, state: dict[str, torch.Tensor]) -> None:
    """Refuse unknown or missing tensors (a tied copy may be missing) and shape changes, before loading."""
    current = model.state_dict()
    unknown = sorted(set(state) - set(current))
    storage: dict[int, set[str]] = {}
    for name, tensor in current.items():
        storage.setdefault(tensor.data_ptr(), set()).add(name)
    missing = sorted(n for n in set(current) - set(state) if not storage[current[n].data_ptr()] & set(state))
    wrong = sorted(n for n, t in state.items() if n in current and t.shape != current[n].shape)
    if unknown or missing or wrong:
        raise WeightsError(
            f"weights do not fit the model: unknown {unknown[:5]}, missing {missing[:5]}, shape {wrong[:5]}"
        )


def apply_state(model: PreTrainedModel, state: dict[str, torch.Tensor]) -> None:
    """Copy ``state`` into the model in place (after ``check_state``)."""
    check_state(model, state)
    model.load_state_dict(state, strict=False)


async def swap(
    model: PreTrainedModel, weights: Weights, path: str | Path, version: str | None, sha256: str | None
) -> None:
    """Serve the weights at ``path`` under the label ``version`` (default ``local:<sha256[:12]>``) from the
    next batch on."""
    try:
        found, digest = await asyncio.to_thread(read_version, path, sha256)
        async with weights.lock:
            if digest != weights.sha256:
                await asyncio.to_thread(apply_version, model, weights, found)
                if not isinstance(found, Adapter):
                    weights.base_sha256 = digest
            weights.version, weights.sha256 = version or local_version(digest), digest
            weights.swaps += 1
            weights.last_error = None
    except Exception as exc:
        weights.last_error = f"{version}: {exc}"
        raise
    log.info("serving weight version %s (sha256 %s) from %s", version, digest[:12], path)
