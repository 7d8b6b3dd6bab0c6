"""LoRA adapters on the served model, merged into it: ``W = W_base + (alpha / r) · B @ A`` per adapted layer.

The server keeps a copy of the base values of the layers an adapter changed; the next adapter starts from
those again, so versions never drift, and a batch costs what a full-weights batch costs (no LoRA matmuls).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from transformers import PreTrainedModel

PREFIX = "base_model.model."
"""peft's prefix of an adapter tensor's name (``base_model.model.<module>.lora_A.weight``)."""
PLAIN = {"use_dora": False, "use_rslora": False, "fan_in_fan_out": False, "rank_pattern": {}, "alpha_pattern": {}}
"""The peft options this merge supports, at these values."""


class AdapterError(Exception):
    """An adapter file that cannot be merged into the served model."""


@dataclass(frozen=True)
class Adapter:
    """An adapter's per-layer updates (already scaled), and the base weights' digest it was trained on."""

    deltas: dict[str, torch.Tensor]
    """``<module>.weight`` -> ``(alpha / r) · B @ A``."""
    base_sha256: str


def metadata(file: Path) -> dict[str, str]:
    """The safetensors header's metadata (``peft_config`` in it marks an adapter)."""
    with safe_open(file, "pt") as f:
        return f.metadata() or {}


def from_state(state: dict[str, torch.Tensor], meta: dict[str, str]) -> Adapter:
    """The updates of a learner's adapter file (``voltbus.services.learner.grpo.lora.save``)."""
    config = json.loads(meta["peft_config"])
    odd = {k: config.get(k) for k, v in PLAIN.items() if config.get(k, v) not in (v, None)}
    if odd:
        raise AdapterError(f"adapter options not supported by the merge: {odd}")
    rank, alpha = int(config["r"]), float(config["lora_alpha"])
    deltas = {}
    for name, a in state.items():
        if not (name.startswith(PREFIX) and name.endswith(".lora_A.weight")):
            if not name.endswith(".lora_B.weight"):
                raise AdapterError(f"adapter tensor {name} is not a LoRA A/B matrix of a linear layer")
            continue
        module = name[len(PREFIX) : -len(".lora_A.weight")]
        b = state.get(f"{PREFIX}{module}.lora_B.weight")
        if b is None:
            raise AdapterError(f"adapter has {name} but no lora_B for {module}")
        deltas[f"{module}.weight"] = (b.float() @ a.float()) * (alpha / rank)
    return Adapter(deltas, meta.get("base_sha256", ""))


def merge(model: PreTrainedModel, base: dict[str, torch.Tensor], adapter: Adapter) -> None:
    """Serve base + ``adapter``: layers the previous adapter changed are restored from ``base`` (which keeps,
    from now on, a copy of every layer this one changes too)."""
    params = dict(model.named_parameters())
    wrong = [n for n, d in adapter.deltas.items() if n not in params or params[n].shape != d.shape]
    if wrong:
        raise AdapterError(f"adapter does not fit the model: unknown or wrong shape {wrong[:5]}")
    with torch.no_grad():
        for name, value in base.items():
            params[name].copy_(value)
        for name, delta in adapter.deltas.items():
            if name not in base:
                base[name] = params[name].detach().clone()
            params[name].copy_((base[name].float() + delta).to(params[name].dtype))
