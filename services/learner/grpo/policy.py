"""The policy being trained: the model, its optimizer, and the files each version is saved to.

A version is a directory ``<weights_dir>/<run_id>/step-<n>/`` holding ``model.safetensors`` (what
inference servers load, referenced by its sha256 from the resources event; above ``shard_mb``, shards and their
index, ``shards.py``), ``optimizer.pt``, and
the model's config and tokenizer, so the directory is also a model directory that can be served
again. Resuming after step n loads that directory, optimizer included. Only the two newest versions keep
``optimizer.pt`` (``keep_optimizers``); older ones keep their weights. With ``lora_rank > 0`` (``lora.py``) the
base stays frozen and a version holds only the adapter (``adapter_model.safetensors``, ``adapter_config.json``).
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from voltbus.services.clients.model import load_model_dir, save_model_dir, weights_sha256
from voltbus.services.clients.model.shards import is_sharded, shard_files, weights_path
from voltbus.services.settings import LearnerSettings

from . import lora

log = logging.getLogger(__name__)
hf_logging.disable_progress_bar()  # a bar per load and save would bury the step lines

WEIGHTS = "model.safetensors"
OPTIMIZER = "optimizer.pt"


def keep_optimizers(folder: Path) -> None:
    """After ``folder`` (``<run>/step-<n>``) was written: delete the optimizer state (twice the weights' size)
    of the run's versions before step n, but the newest of them. A resume starts from the last *recorded*
    checkpoint, which is step n or, until the loop records it, the one before; older versions keep their weights."""
    step = _step(folder)
    if step is None:
        return
    older = sorted((s, p) for p in folder.parent.iterdir() if (s := _step(p)) is not None and s < step)
    for _, path in older[:-1]:
        (path / OPTIMIZER).unlink(missing_ok=True)


def version_file(folder: Path) -> Path:
    """The weights file of a saved version: the adapter's (LoRA), the model's, or its shards' index."""
    return folder / lora.ADAPTER if (folder / lora.ADAPTER).is_file() else weights_path(folder)


def _step(folder: Path) -> int | None:
    prefix, _, number = folder.name.partition("-")
    return int(number) if prefix == "step" and number.isdigit() else None


class Policy:
    """Model, tokenizer, optimizer and (with a KL term) the frozen starting model; with LoRA the model is
    the base wrapped by peft, and only the adapter's parameters are in the optimizer."""

    def __init__(
        self, model: PreTrainedModel, tok: PreTrainedTokenizerBase, settings: LearnerSettings, base_sha256: str = ""
    ) -> None:
        self.tok, self.settings, self.base_sha256 = tok, settings, base_sha256
        self.reference: PreTrainedModel | lora.BaseView | None = None
        if settings.kl_coef > 0 and not settings.lora_rank:
            self.reference = copy.deepcopy(model).eval()
            self.reference.requires_grad_(False)
        self.model = lora.wrap(model, settings) if settings.lora_rank else model
        if settings.kl_coef > 0 and settings.lora_rank:
            self.reference = lora.BaseView(self.model)  # the base, adapters off: no copy
        trained = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(trained, lr=settings.lr, weight_decay=0.0)

    @classmethod
    def load(cls, settings: LearnerSettings, checkpoint: Path | None = None) -> Policy:
        """The starting model, or the state saved at ``checkpoint`` (optimizer included)."""
        lora_on = settings.lora_rank > 0
        source = settings.model_dir if lora_on else checkpoint or settings.model_dir
        if source is None:
            raise ValueError("the learner needs a starting model: set learner.model_dir (voltbus model init)")
        model, tok = load_model_dir(source)
        policy = cls(model, tok, settings, weights_sha256(source) if lora_on else "")
        if lora_on and checkpoint is not None:
            lora.load(policy.model, checkpoint, policy.base_sha256)
        if checkpoint is not None and (checkpoint / OPTIMIZER).is_file():
            policy.optimizer.load_state_dict(torch.load(checkpoint / OPTIMIZER, weights_only=True))
        if checkpoint is not None and settings.kl_coef > 0 and settings.model_dir is not None and not lora_on:
            policy.reference = load_model_dir(settings.model_dir)[0].eval()
            policy.reference.requires_grad_(False)
        return policy

    def save(self, run_id: str, step: int) -> tuple[Path, str]:
        """Write the version after ``step``; returns (its weights file, their sha256)."""
        folder = Path(self.settings.weights_dir) / run_id / f"step-{step}"
        if self.settings.lora_rank:
            file = lora.save(self.model, folder, self.base_sha256)
        else:
            shard = int(self.settings.shard_mb * 1024 * 1024)
            file = weights_path(save_model_dir(self.model, self.tok, folder, shard))
            for written in shard_files(file) if is_sharded(file) else [file]:
                written.chmod(0o644)  # safetensors writes 0600; inference servers may run as another user
        torch.save(self.optimizer.state_dict(), folder / OPTIMIZER)
        keep_optimizers(folder)
        return file, weights_sha256(file)


def initial_weights(settings: LearnerSettings) -> tuple[Path, str]:
    """The starting model's weights file and digest (version 1 of a run)."""
    if settings.model_dir is None:
        raise ValueError("the learner needs a starting model: set learner.model_dir (voltbus model init)")
    path = weights_path(settings.model_dir)  # model.safetensors, or the index of its shards
    return path, weights_sha256(path)
