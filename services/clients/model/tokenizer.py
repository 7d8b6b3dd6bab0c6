"""The character tokenizer, built in code: one token per printable ASCII character, plus newline.

``<s>`` starts every completions prompt (a post-processor adds it) and every chat prompt (the chat
template writes it); ``</s>`` ends an answer; ``<pad>`` pads; ``<unk>`` stands for any other character.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]
"""Special tokens, ids 0..3."""
CHARS = [chr(c) for c in range(32, 127)] + ["\n"]
"""Printable ASCII (space to ``~``) and newline: ids 4..99."""
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)
"""``<s>user: 2+3=\\nassistant: `` for one user message with the generation prompt."""


def build_tokenizer() -> PreTrainedTokenizerFast:
    """The tokenizer (100 tokens); ``save_pretrained`` writes a standard ``tokenizer.json``.

    >>> tok = build_tokenizer()
    >>> tok("2+3=").input_ids, tok.decode([23, 2], skip_special_tokens=True), len(tok)
    ([1, 22, 15, 23, 33], '3', 100)
    """
    vocab = {token: i for i, token in enumerate(SPECIALS + CHARS)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    backend.decoder = decoders.Fuse()
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", vocab["<s>"])]
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok
