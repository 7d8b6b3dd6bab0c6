"""The tiny Llama (about 1 M parameters), and model directories in the standard Hugging Face layout."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerBase

from . import shards
from .tokenizer import build_tokenizer

WEIGHTS_FILE = "model.safetensors"


def tiny_config(vocab_size: int, max_positions: int = 512) -> LlamaConfig:
    """hidden 128, 4 layers, 4 heads, feed-forward 512, tied embeddings."""
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )


def build_tiny_model(seed: int = 0) -> LlamaForCausalLM:
    """A randomly initialised tiny Llama for the character tokenizer; the same seed gives the same weights."""
    tok = build_tokenizer()
    with torch.random.fork_rng(devices=[]):  # the caller's random state is left as it was
        torch.manual_seed(seed)
        model = LlamaForCausalLM(tiny_config(len(tok)))
    return model.float().eval()


def save_model_dir(
    model: LlamaForCausalLM, tok: PreTrainedTokenizerBase, path: str | Path, max_shard_bytes: int | None = None
) -> Path:
    """Write ``config.json``, ``model.safetensors``, ``generation_config.json`` and the tokenizer files; weights
    larger than ``max_shard_bytes`` as shards and their index (``shards.py``)."""
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    shard = {"max_shard_size": max_shard_bytes} if max_shard_bytes else {}
    model.save_pretrained(out, safe_serialization=True, **shard)
    tok.save_pretrained(out)
    return out


def load_model_dir(path: str | Path, device: str = "cpu") -> tuple[LlamaForCausalLM, PreTrainedTokenizerBase]:
    """The model (fp32, eval mode) and tokenizer of a model directory; never reaches the network."""
    folder = Path(path)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(
            f"{folder} is not a model directory (no config.json); create one with voltbus model init"
        )
    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True)
    return model.to(device).eval(), tok


def weights_sha256(path: str | Path) -> str:
    """SHA-256 of a weights file or a model directory's weights (a sharded set's: ``shards.weights_sha256``), as hex."""
    return shards.weights_sha256(path)
