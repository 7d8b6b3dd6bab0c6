"""Training rows → verl's batch format (the GPU path's ``DataProto``), with the conventions verl's PPO
trainer expects: prompts left-padded to ``max_prompt``, responses right-padded to ``max_response``,
``input_ids = prompt ++ response``, ``position_ids = clamp(cumsum(attention) - 1, 0)``,
``response_mask`` (1 on sampled tokens, 0 on tool/user tokens), ``rollout_log_probs`` (the logprobs
recorded at sampling time, 0.0 on padding), and ``token_level_scores`` (the rollout's reward on its
last response token). Non-tensor fields: ``uid`` (the GRPO group: task id), ``rollout_id_list``.

Differences from Agent Lightning's conversion, on purpose: scores stay float32 (AL stores bfloat16,
so 0.33 becomes 0.330078); an over-long prompt keeps its **last** tokens and is marked in
``is_drop_mask`` (counted), never trained silently; an empty response is dropped and counted rather
than losing its score. ``to_dataproto`` needs verl (the ``gpu`` extra); ``to_verl_batch`` only torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..grpo.objective import Row


@dataclass
class VerlBatch:
    """Tensors and non-tensors in verl's names, and what was cut or dropped on the way."""

    tensors: dict[str, torch.Tensor]
    non_tensors: dict[str, list[Any]]
    counts: dict[str, int] = field(default_factory=dict)


def to_verl_batch(
    rows: Sequence[Row],
    rewards: Mapping[str, float],
    groups: Mapping[str, str],
    pad_id: int,
    max_prompt: int,
    max_response: int,
) -> VerlBatch:
    """The rows as verl's batch tensors (see the module docstring for the conventions)."""
    kept = [r for r in rows if r.response_ids]
    counts = {"empty_responses": len(rows) - len(kept), "truncated": 0, "overlong_prompts": 0}
    n = len(kept)
    prompts = torch.full((n, max_prompt), pad_id, dtype=torch.long)
    responses = torch.full((n, max_response), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((n, max_prompt), dtype=torch.long)
    response_mask = torch.zeros((n, max_response), dtype=torch.long)
    response_attention = torch.zeros((n, max_response), dtype=torch.long)
    logprobs = torch.zeros((n, max_response), dtype=torch.float32)
    scores = torch.zeros((n, max_response), dtype=torch.float32)
    drop = torch.zeros(n, dtype=torch.bool)
    for i, row in enumerate(kept):
        prompt = list(row.prompt_ids)
        if len(prompt) > max_prompt:
            prompt, drop[i] = prompt[-max_prompt:], True
            counts["overlong_prompts"] += 1
        length = min(len(row.response_ids), max_response)
        counts["truncated"] += length < len(row.response_ids)
        prompts[i, max_prompt - len(prompt) :] = torch.tensor(prompt)
        prompt_mask[i, max_prompt - len(prompt) :] = 1
        responses[i, :length] = torch.tensor(list(row.response_ids)[:length])
        response_attention[i, :length] = 1
        response_mask[i, :length] = torch.tensor(list(row.response_mask)[:length])
        logprobs[i, :length] = torch.tensor(list(row.logprobs)[:length], dtype=torch.float32)
        scores[i, length - 1] = float(rewards[row.rollout_id])
    attention = torch.cat([prompt_mask, response_attention], dim=1)
    tensors = {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention,
        "position_ids": torch.clamp(torch.cumsum(attention, dim=1) - 1, min=0),
        "response_mask": response_mask,
        "rollout_log_probs": logprobs,
        "token_level_scores": scores,
        "is_drop_mask": drop,
    }
    non_tensors = {"uid": [groups[r.rollout_id] for r in kept], "rollout_id_list": [r.rollout_id for r in kept]}
    return VerlBatch(tensors, non_tensors, counts)


def to_dataproto(batch: VerlBatch) -> Any:
    """verl's ``DataProto`` of the batch; ImportError with the install hint when verl is absent."""
    try:
        import numpy as np
        from verl import DataProto
    except ImportError as exc:
        raise ImportError(
            f"the verl backend needs verl ({exc.name} is missing): install voltbus[gpu] on a CUDA machine"
        ) from exc
    non_tensors = {k: np.array(v, dtype=object) for k, v in batch.non_tensors.items()}
    return DataProto.from_dict(tensors=batch.tensors, non_tensors=non_tensors)
