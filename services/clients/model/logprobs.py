"""The learner's recomputation of the logprobs of sampled tokens: raw, temperature 1, float32."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel


@torch.no_grad()
def sequence_logprobs(model: PreTrainedModel, prompt_ids: Sequence[int], response_ids: Sequence[int]) -> list[float]:
    """``log p(response_ids[i] | prompt_ids + response_ids[:i])`` for each i, from one forward pass.

    These are the model's own log-softmax values (no temperature, top-p or penalties), the same
    quantity the inference server returns as ``logprobs`` (vLLM's ``raw_logprobs`` mode).
    """
    if not prompt_ids:
        raise ValueError("prompt_ids is empty: the first response token needs a context")
    if not response_ids:
        return []
    device = next(model.parameters()).device
    ids = torch.tensor([list(prompt_ids) + list(response_ids)], device=device)
    logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()
    logp = torch.log_softmax(logits, dim=-1)
    picked = logp.gather(-1, torch.tensor(list(response_ids), device=device)[:, None])[:, 0]
    return picked.tolist()
