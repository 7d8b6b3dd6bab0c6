"""The policy being trained: the model, its optimizer, and the files each version is saved to.

A version is a directory ``<weights_dir>/<run_id>/step-<n>/`` holding ``model.safetensors`` (what
inference servers load, referenced by its sha256 from the resources event), ``optimizer.pt``, and
the model's config and tokenizer, so the directory is also a model directory that can be served
again. Resuming after step n loads that directory, optimizer included. Only the two newest versions keep
``optimizer.pt`` (``keep_optimizers``); older ones keep their weights.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from voltbus.services.clients.model import load_model_dir, save_model_dir, weights_sha256
from voltbus.services.settings import LearnerSettings

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


def _step(folder: Path) -> int | None:
    prefix, _, number = folder.name.partition("-")
    return int(number) if prefix == "step" and number.isdigit() else None


class Policy:
    """Model, tokenizer, optimizer and (with a KL term) the frozen starting model."""

    def __init__(self, model: PreTrainedModel, tok: PreTrainedTokenizerBase, settings: LearnerSettings) -> None:
        self.model, self.tok, self.settings = model, tok, settings
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=0.0)
        self.reference: PreTrainedModel | None = None
        if settings.kl_coef > 0:
            self.reference = copy.deepcopy(model).eval()
            self.reference.requires_grad_(False)

    @classmethod
    def load(cls, settings: LearnerSettings, checkpoint: Path | None = None) -> Policy:
        """The starting model, or the state saved at ``checkpoint`` (optimizer included)."""
        source = checkpoint or settings.model_dir
        if source is None:
            raise ValueError("the learner needs a starting model: set learner.model_dir (voltbus model init)")
        model, tok = load_model_dir(source)
        policy = cls(model, tok, settings)
        if checkpoint is not None and (checkpoint / OPTIMIZER).is_file():
            policy.optimizer.load_state_dict(torch.load(checkpoint / OPTIMIZER, weights_only=True))
        if checkpoint is not None and settings.kl_coef > 0 and settings.model_dir is not None:
            policy.reference = load_model_dir(settings.model_dir)[0].eval()
            policy.reference.requires_grad_(False)
        return policy

    def save(self, run_id: str, step: int) -> tuple[Path, str]:
        """Write the version after ``step``; returns (its weights file, their sha256)."""
        folder = Path(self.settings.weights_dir) / run_id / f"step-{step}"
        save_model_dir(self.model, self.tok, folder)
        (folder / WEIGHTS).chmod(0o644)  # safetensors writes 0600; inference servers may run as another user
        torch.save(self.optimizer.state_dict(), folder / OPTIMIZER)
        keep_optimizers(folder)
        return folder / WEIGHTS, weights_sha256(folder / WEIGHTS)


def initial_weights(settings: LearnerSettings) -> tuple[Path, str]:
    """The starting model's weights file and digest (version 1 of a run)."""
    if settings.model_dir is None:
        raise ValueError("the learner needs a starting model: set learner.model_dir (voltbus model init)")
    path = Path(settings.model_dir) / WEIGHTS
    return path, weights_sha256(path)
