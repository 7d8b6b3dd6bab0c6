"""Rows → verl's batch tensors on CPU: padding sides, positions, masks, logprobs, score placement, and the
over-long / empty cases counted; building a real DataProto needs verl (verl marker)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from voltbus.services.learner.grpo.objective import Row
from voltbus.services.learner.verl.batch import to_dataproto, to_verl_batch

PAD = 0
ROWS = [
    Row("r1", [5, 6, 7], [8, 9], [1, 1], [-0.5, -0.25]),
    Row("r2", [5, 6, 7, 10, 11, 12], [13, 14, 15, 16], [1, 0, 0, 1], [-0.1, 0.0, 0.0, -0.2]),
    Row("r3", [5], [], [], []),
]


def test_padding_positions_masks_and_scores() -> None:
    batch = to_verl_batch(ROWS, {"r1": 1.0, "r2": 0.33, "r3": 0.0}, {"r1": "t", "r2": "t", "r3": "u"}, PAD, 4, 3)
    t = batch.tensors
    assert t["prompts"][0].tolist() == [PAD, 5, 6, 7]  # left-padded
    assert t["prompts"][1].tolist() == [7, 10, 11, 12]  # over-long: its last tokens kept ...
    assert t["is_drop_mask"].tolist() == [False, True]  # ... and marked for dropping
    assert t["responses"].tolist() == [[8, 9, PAD], [13, 14, 15]]  # right-padded; r2 truncated to 3
    assert t["response_mask"].tolist() == [[1, 1, 0], [1, 0, 0]]
    assert t["attention_mask"][0].tolist() == [0, 1, 1, 1, 1, 1, 0]
    assert t["position_ids"][0].tolist() == [0, 0, 1, 2, 3, 4, 4]
    assert torch.equal(t["input_ids"], torch.cat([t["prompts"], t["responses"]], dim=1))
    assert t["rollout_log_probs"][0].tolist() == [-0.5, -0.25, 0.0]
    assert t["token_level_scores"].tolist() == [[0.0, 1.0, 0.0], [0.0, 0.0, pytest.approx(0.33)]]
    assert t["token_level_scores"].dtype == torch.float32  # not bfloat16: 0.33 stays 0.33
    assert batch.non_tensors == {"uid": ["t", "t"], "rollout_id_list": ["r1", "r2"]}
    assert batch.counts == {"empty_responses": 1, "truncated": 1, "overlong_prompts": 1}


@pytest.mark.skipif(importlib.util.find_spec("verl") is not None, reason="verl is installed: the verl test covers it")
def test_without_verl_the_dataproto_step_says_what_to_install() -> None:
    batch = to_verl_batch(ROWS[:1], {"r1": 1.0}, {"r1": "t"}, PAD, 4, 3)
    with pytest.raises(ImportError, match=r"install voltbus\[gpu\]"):
        to_dataproto(batch)


@pytest.mark.verl
def test_dataproto_with_verl() -> None:
    pytest.importorskip("verl", reason="verl is not installed (voltbus[gpu], or the CPU venv of .ci/verl)")
    batch = to_verl_batch(ROWS[:2], {"r1": 1.0, "r2": 0.0}, {"r1": "t", "r2": "t"}, PAD, 8, 4)
    proto = to_dataproto(batch)
    assert proto.batch["responses"].shape == (2, 4) and list(proto.non_tensor_batch["uid"]) == ["t", "t"]
