"""LoRA on the CPU learner (peft): the policy wrapped with trainable adapters over a frozen base, and the
adapter files a version holds (``adapter_model.safetensors`` + ``adapter_config.json``, peft's layout).

The safetensors file carries, in its metadata, the adapter's config and the sha256 of the base weights it
was trained on, so the one file published as a version is enough for an inference server to merge it.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import PreTrainedModel

from voltbus.services.settings import LearnerSettings

ADAPTER = "adapter_model.safetensors"
"""A LoRA version's weights file (peft's name; its metadata says it is an adapter and on which base)."""
FORMAT = "peft-lora"
"""``WeightsRef.format`` of a published adapter."""


def wrap(model: PreTrainedModel, settings: LearnerSettings) -> Any:
    """``model`` wrapped by peft with rank-``lora_rank`` adapters on ``lora_target_modules``; the base is frozen."""
    from peft import LoraConfig, get_peft_model

    targets = settings.lora_target_modules.strip()
    config = LoraConfig(
        r=settings.lora_rank,
        lora_alpha=settings.lora_alpha,
        target_modules=targets if targets == "all-linear" else [t.strip() for t in targets.split(",") if t.strip()],
        lora_dropout=0.0,  # dropout would make the trained logprobs differ from the ones the server sampled with
        bias="none",
    )
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():  # lora_A's init: the same in every learner
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)  # peft 0.21.2
        torch.manual_seed(settings.seed)
        return get_peft_model(model, config)


class BaseView:
    """The wrapped model with its adapters switched off: the frozen starting policy (the KL reference) without a
    second copy of the model."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def __call__(self, **inputs: Any) -> Any:
        with self.model.disable_adapter():
            return self.model(**inputs)

    def get_base_model(self) -> Any:
        """The transformers model under the adapters (what peft's own ``get_base_model`` gives)."""
        return self.model.get_base_model()


def adapter_state(model: Any) -> dict[str, Any]:
    """The adapter's tensors, whole and on the CPU (verl's FSDP2 engine holds DTensors: each is gathered from
    every rank, so with several ranks every rank calls this)."""
    from peft import get_peft_model_state_dict

    state = get_peft_model_state_dict(model)
    return {
        k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().cpu().contiguous() for k, v in state.items()
    }


def save(model: Any, folder: Path, base_sha256: str, tensors: dict[str, Any] | None = None) -> Path:
    """Write the adapter's tensors (``tensors``, else ``adapter_state(model)``) and config into ``folder``;
    returns the tensors' file."""
    tensors = adapter_state(model) if tensors is None else tensors
    folder.mkdir(parents=True, exist_ok=True)
    config = model.peft_config["default"]
    config.save_pretrained(folder)
    meta = {"format": "pt", "peft_config": json.dumps(config.to_dict(), default=list), "base_sha256": base_sha256}
    save_file(tensors, folder / ADAPTER, metadata=meta)
    (folder / ADAPTER).chmod(0o644)  # inference servers may run as another user
    return folder / ADAPTER


def load(model: Any, folder: Path, base_sha256: str) -> None:
    """Load the adapter saved in ``folder`` into the wrapped ``model`` (it must be for the same base)."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    found = base_of(folder / ADAPTER)
    if found != base_sha256:
        raise ValueError(f"the adapter in {folder} was trained on base weights {found}, not on {base_sha256}")
    result = set_peft_model_state_dict(model, load_file(folder / ADAPTER))
    if result.unexpected_keys:
        raise ValueError(f"the adapter in {folder} does not fit the model: {result.unexpected_keys[:5]}")


def base_of(file: Path) -> str | None:
    """The base weights' sha256 an adapter file names (None: not an adapter file)."""
    with safe_open(file, "pt") as f:
        meta = f.metadata() or {}
    return meta.get("base_sha256") if "peft_config" in meta else None


def ref_fields(file: Path) -> dict[str, str]:
    """The ``WeightsRef`` fields that mark ``file`` as an adapter (none for full weights)."""
    if file.name != ADAPTER:
        return {}
    base = base_of(file)
    return {"format": FORMAT, "base_sha256": base} if base else {}
