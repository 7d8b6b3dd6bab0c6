"""The prefill computes logits at each prompt's last position only, and sampling gives the same tokens and
logprobs as a model whose forward has no ``logits_to_keep`` (every position's logits)."""

from __future__ import annotations

import torch

from voltbus.model import build_tiny_model, build_tokenizer
from voltbus.services.inference.engine import Engine, Row
from voltbus.services.inference.sampling import Sampling


class AllLogits(torch.nn.Module):
    """A causal LM whose forward has no ``logits_to_keep``: the engine takes the last position itself."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner, self.generation_config, self.config = inner, inner.generation_config, inner.config

    def forward(self, input_ids, attention_mask, position_ids, past_key_values, use_cache):  # noqa: ANN001, ANN201
        return self.inner(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
            past_key_values=past_key_values, use_cache=use_cache,
        )  # fmt: skip


def sample(model: torch.nn.Module, prompts: list[list[int]]) -> list[Row]:
    rows = [Row(p, Sampling(max_tokens=6, temperature=1.0)) for p in prompts]
    Engine(model, build_tokenizer(), seed=7).generate(rows)
    return rows


def test_the_output_layer_sees_one_position_per_row_at_the_prefill() -> None:
    model, tok = build_tiny_model(0), build_tokenizer()
    prompts = [tok("a longer prompt than the other: 12+30=").input_ids, tok("1+2=").input_ids]
    widths: list[int] = []
    hook = model.get_output_embeddings().register_forward_hook(lambda _m, a, _o: widths.append(a[0].shape[1]))
    kept = sample(model, prompts)
    hook.remove()
    assert widths and set(widths) == {1}  # the prefill included
    plain = sample(AllLogits(model), prompts)
    for a, b in zip(kept, plain, strict=True):
        assert a.token_ids == b.token_ids and len(a.token_ids) > 0
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) <= 1e-5
