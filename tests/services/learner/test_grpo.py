"""GRPO math on the tiny CPU model: alignment with recorded logprobs, per-rollout weights, clipping, KL,
and a fixed problem where a few steps provably raise the expected reward."""

from __future__ import annotations

import pytest
import torch

from voltbus.model import build_tiny_model, build_tokenizer, sequence_logprobs
from voltbus.services.learner.grpo.objective import (
    Row,
    collate,
    group_advantages,
    passes,
    policy_logprobs,
    ppo_loss,
    token_weights,
    update,
)

TOK = build_tokenizer()


def row(model, rid: str, prompt: str, response: str) -> Row:
    p = TOK(prompt).input_ids
    r = TOK(response, add_special_tokens=False).input_ids
    return Row(rid, p, r, [1] * len(r), sequence_logprobs(model, p, r))


def test_fresh_rows_have_ratio_one_and_no_clipping() -> None:
    model = build_tiny_model(0)
    rows = [row(model, "a", "1+2=", "3"), row(model, "b", "12+7=", "19 ok"), row(model, "c", "9+9=", "18")]
    batch = collate(rows, {"a": 1.0, "b": -1.0, "c": 0.0}, TOK.pad_token_id)
    with torch.no_grad():
        new = policy_logprobs(model, batch)
    assert torch.allclose(new * batch.targets, batch.old_logprobs, atol=1e-5)
    _, stats = ppo_loss(new, batch)
    assert stats["clip_fraction"] == 0.0 and abs(stats["approx_kl_old"]) < 1e-6
    assert float(batch.targets.sum()) == 1 + 5 + 2


def test_tool_tokens_are_not_trained() -> None:
    model = build_tiny_model(0)
    p, r = TOK("2+2=").input_ids, TOK("4 tool:ok 4", add_special_tokens=False).input_ids
    mask = [1] + [0] * 8 + [1, 1]
    lp = [x * m for x, m in zip(sequence_logprobs(model, p, r), mask, strict=True)]
    batch = collate([Row("a", p, r, mask, lp)], {"a": 1.0}, TOK.pad_token_id)
    assert float(batch.targets.sum()) == 3 and float(batch.weights.sum()) == 1.0


def test_a_rollout_split_into_rows_weighs_what_a_whole_one_weighs() -> None:
    rows = [
        Row("whole", [1], [5, 6, 7, 8], [1, 1, 1, 1], [0.0] * 4),
        Row("split", [1], [5], [1], [0.0]),
        Row("split", [1, 5, 2], [7, 8, 9], [1, 1, 1], [0.0] * 3),
    ]
    weights = token_weights(rows)
    per_token = [w * sum(r.response_mask) for w, r in zip(weights, rows, strict=True)]
    assert abs(per_token[0] - 0.5) < 1e-12 and abs(per_token[1] + per_token[2] - 0.5) < 1e-12


def test_advantages_are_per_group_and_zero_for_uniform_groups() -> None:
    rewards = {"a1": 1.0, "a2": 0.0, "a3": 0.0, "a4": 1.0, "b1": 1.0, "b2": 1.0}
    groups = {k: k[0] for k in rewards}
    adv = group_advantages(rewards, groups)
    assert [round(adv[k], 4) for k in ("a1", "a2", "a3", "a4")] == [1.0, -1.0, -1.0, 1.0]
    assert adv["b1"] == adv["b2"] == 0.0


def test_clipping_and_kl_to_a_reference() -> None:
    model = build_tiny_model(0)
    rows = [row(model, "a", "1+2=", "3"), row(model, "b", "1+2=", "4")]
    batch = collate(rows, {"a": 1.0, "b": -1.0}, TOK.pad_token_id)
    with torch.no_grad():
        new = policy_logprobs(model, batch)
    shifted = new + 0.5 * batch.targets  # as if the policy had moved far from the sampler
    _, stats = ppo_loss(shifted, batch, clip=0.2, ref=new, kl_coef=0.1)
    assert stats["clip_fraction"] == 1.0 and stats["kl_ref"] > 0
    _, same = ppo_loss(new, batch, ref=new, kl_coef=0.1)
    assert abs(same["kl_ref"]) < 1e-7


def expected_reward(model, prompt_ids: list[int], good: int) -> float:
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt_ids])).logits[0, -1]
    return float(torch.softmax(logits, -1)[good])


def test_a_few_grpo_steps_raise_the_expected_reward_on_a_fixed_seed() -> None:
    """Sample one token after a fixed prompt; reward 1 for the digit 7. Expected reward = p(7)."""
    torch.manual_seed(0)
    model = build_tiny_model(0)
    prompt = TOK("3+4=").input_ids
    good = TOK("7", add_special_tokens=False).input_ids[0]
    before = expected_reward(model, prompt, good)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(8):
        with torch.no_grad():
            probs = torch.softmax(model(input_ids=torch.tensor([prompt])).logits[0, -1], -1)
        probs = 0.5 * probs + 0.5 * torch.nn.functional.one_hot(torch.tensor(good), probs.numel())  # explore
        sampled = torch.multinomial(probs, 16, replacement=True, generator=torch.Generator().manual_seed(step))
        tokens = [[int(t)] for t in sampled]
        rows = [Row(f"r{i}", prompt, t, [1], sequence_logprobs(model, prompt, t)) for i, t in enumerate(tokens)]
        rewards = {r.rollout_id: float(r.response_ids[0] == good) for r in rows}
        update(model, optimizer, rows, group_advantages(rewards, dict.fromkeys(rewards, "t")), TOK.pad_token_id)
    after = expected_reward(model, prompt, good)
    assert after > before + 0.2, (before, after)


def full_logprobs(model, batch) -> torch.Tensor:
    """``log p(token t+1 | tokens ≤ t)`` from the logits at every position (the plain way)."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, batch.input_ids[:, 1:, None])[..., 0]


def test_the_output_layer_runs_only_where_a_sampled_token_is_predicted() -> None:
    model = build_tiny_model(0)
    long_prompt = "1+2+3+4+5+6+7+8+9+10+11="
    rows = [row(model, "a", long_prompt, "66"), row(model, "b", "9+9=", "18 ok")]
    batch = collate(rows, {"a": 1.0, "b": -1.0}, TOK.pad_token_id)
    widths: list[int] = []
    hook = model.get_output_embeddings().register_forward_hook(lambda _m, args, _o: widths.append(args[0].shape[1]))
    with torch.no_grad():
        new = policy_logprobs(model, batch)
    hook.remove()
    on = batch.targets > 0
    assert widths == [int(batch.targets.any(0).sum())] and widths[0] < batch.targets.shape[1] // 2
    assert torch.allclose(new[on], full_logprobs(model, batch)[on], atol=1e-5)
    assert float(new[:, ~batch.targets.any(0)].abs().sum()) == 0.0  # positions no row samples at


def test_a_model_without_logits_to_keep_gets_the_same_logprobs() -> None:
    model = build_tiny_model(0)
    rows = [row(model, "a", "1+2=", "3"), row(model, "b", "12+7=", "19 ok")]
    batch = collate(rows, {"a": 1.0, "b": -1.0}, TOK.pad_token_id)

    class Plain(torch.nn.Module):  # a causal LM whose forward has no logits_to_keep
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, input_ids, attention_mask):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask)

    on = batch.targets > 0
    with torch.no_grad():
        assert torch.allclose(policy_logprobs(Plain(), batch)[on], full_logprobs(model, batch)[on], atol=1e-5)


def test_an_update_in_several_passes_is_the_update_in_one() -> None:
    """Rows of different lengths split into passes of a few tokens: the same weights, loss, KL and means, to
    float noise (each token keeps its weight in the whole batch)."""
    reference = build_tiny_model(1)
    problems = [("1+2=", "3"), ("12+7=", "19 ok"), ("9+9=", "18"), ("100+23=", "123 x"), ("5+5=", "10")]
    results = []
    for max_tokens in (0, 24):
        model = build_tiny_model(0)
        rows = [row(model, f"r{i}", p, r) for i, (p, r) in enumerate(problems)]
        assert len(passes(rows, max_tokens)) == (1 if max_tokens == 0 else 3)
        adv = {"r0": 1.0, "r1": -1.0, "r2": 0.5, "r3": -0.5, "r4": 0.0}
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        stats = update(
            model, optimizer, rows, adv, TOK.pad_token_id,
            epochs=2, ref_model=reference, kl_coef=0.1, max_tokens_per_pass=max_tokens,
        )  # fmt: skip
        results.append((stats, {k: v.detach().clone() for k, v in model.state_dict().items()}))
    (one, w1), (many, w2) = results
    assert one["tokens"] == many["tokens"] == 1 + 5 + 2 + 5 + 2
    for key in ("loss", "kl_ref", "clip_fraction", "approx_kl_old", "grad_norm"):
        assert many[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), key
    assert one["kl_ref"] > 0 and abs(one["approx_kl_old"]) > 0  # the second epoch moved away from both
    assert max(float((w1[k] - w2[k]).abs().max()) for k in w1) < 1e-4
    moved = max(float((w1[k] - build_tiny_model(0).state_dict()[k]).abs().max()) for k in w1)
    assert moved > 1e-4
