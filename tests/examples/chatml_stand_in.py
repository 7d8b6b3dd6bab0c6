"""A stand-in for SmolLM2-135M-Instruct that the default venv builds in seconds: a byte-level BPE tokenizer trained
in code, SmolLM2's ChatML chat template and special tokens, and a tiny Llama warm-started on the example's chats
(a noisy format and answer), so that the example's rollouts earn rewards that differ and GRPO has a gradient."""

from __future__ import annotations

import random
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from voltbus.model import save_model_dir, train_on_samples

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
"""SmolLM2's: unknown 0, start of a turn 1, end of a turn (eos, pad) 2."""
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""SmolLM2's ChatML template, less its default system prompt."""
CORPUS = [
    f"{a}+{b}= The answer is {a + b}. Reply with one sentence: The answer is N." for a in range(13) for b in range(13)
]


def build_tokenizer(vocab_size: int = 320) -> PreTrainedTokenizerFast:
    """A byte-level BPE (merges learned from ``CORPUS``: multi-character tokens, as in SmolLM2) with ChatML."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(CORPUS, trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        unk_token="<|endoftext|>",
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def chat(tok: PreTrainedTokenizerFast, system: str, rng: random.Random) -> list[tuple[str, bool]]:
    """One warm-start chat: the example's prompt, then (trained) ``The answer is N.`` with the right N half of the
    time, or a bare number a third of the time."""
    a, b = rng.randint(1, 12), rng.randint(1, 12)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": f"{a}+{b}="}]
    prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    n = a + b if rng.random() < 0.5 else rng.randint(2, 24)
    answer = str(n) if rng.random() < 0.33 else f"The answer is {n}."
    return [(prompt.removeprefix(tok.bos_token), False), (answer + tok.eos_token, True)]


def build_stand_in(path: Path, system: str, seed: int = 0, warm_steps: int = 40, positions: int = 256) -> Path:
    """Write the stand-in's model directory (about 1 MB) to ``path``, warm-started on chats with ``system``;
    ``positions``: its context length (a multi-turn chat with worked examples needs about 1,024)."""
    tok = build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=positions,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    train_on_samples(model, tok, lambda rng: chat(tok, system, rng), steps=warm_steps, batch=16, seed=seed)
    return save_model_dir(model.float().eval(), tok, path)
