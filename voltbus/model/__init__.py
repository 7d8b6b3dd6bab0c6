"""A tiny CPU language model: character tokenizer, Llama model, warm start and logprob recomputation.

Needs torch and transformers (``pip install 'voltbus[learn]'``); ``import voltbus`` never loads them. A
façade: the implementation is ``voltbus.services.clients.model``.
"""

from __future__ import annotations

from voltbus.services.clients.model import (
    Segment,
    addition_batch,
    build_tiny_model,
    build_tokenizer,
    greedy_accuracy,
    load_model_dir,
    save_model_dir,
    segments_batch,
    sequence_logprobs,
    train_on_samples,
    warm_start,
    weights_sha256,
)

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
