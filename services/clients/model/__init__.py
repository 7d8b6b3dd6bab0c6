"""A tiny CPU language model: character tokenizer, Llama model, warm start and logprob recomputation.

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
from .sft import Segment, segments_batch, train_on_samples
from .tiny import build_tiny_model, load_model_dir, save_model_dir, weights_sha256
from .tokenizer import build_tokenizer
from .warmstart import addition_batch, greedy_accuracy, warm_start

__all__ = [
    "Segment",
    "addition_batch",
    "build_tiny_model",
    "build_tokenizer",
    "greedy_accuracy",
    "load_model_dir",
    "save_model_dir",
    "segments_batch",
    "sequence_logprobs",
    "train_on_samples",
    "warm_start",
    "weights_sha256",
]
