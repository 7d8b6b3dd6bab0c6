"""Token fidelity with SmolLM2's BPE tokenizer and ChatML template: every trained token is one the engine sampled,
turn separators are observations (mask 0), a reply re-tokenized differently in the next prompt is a counted prefix
mismatch, never trained text; the learner agrees with the recorded logprobs and its update is served again."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import torch

from voltbus.model import save_model_dir, sequence_logprobs
from voltbus.projections.adapter import AdapterSettings, AttemptInput, CallRow, RewardRow, adapt
from voltbus.schemas import ModelCalled
from voltbus.services.eventlog import EventLog
from voltbus.services.learner.grpo.actor import TorchActor
from voltbus.services.learner.grpo.objective import Row, collate, policy_logprobs
from voltbus.services.learner.grpo.policy import Policy
from voltbus.services.settings import LearnerSettings
from voltbus.store import Store

from ..projections.adapter.trace import Trace
from ..services.gateway.conftest import GatewayFactory, model_calls
from .conftest import MODEL

pytestmark = [pytest.mark.smollm2, pytest.mark.timeout(900)]  # the first test may wait for the conversion

EOS = 2
SYSTEM = {"role": "system", "content": "You are a helpful assistant. Answer in one short sentence."}
QUESTIONS = ["What is 3+4?", "And 10 times that?", "Say it in words."]


def chat_ids(tok: Any, messages: list[dict[str, str]]) -> list[int]:
    """The prompt the server builds: the chat template's text (with the generation prompt), tokenized."""
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tok(text, add_special_tokens=False).input_ids


def spelled_out(tok: Any, text: str) -> list[int]:
    """A tokenization of ``text`` that the tokenizer never produces: one token per byte-level character
    (what a model may sample at temperature 1, e.g. ``4`` then ``.`` where the tokenizer has one token)."""
    pieces = "".join(tok.convert_ids_to_tokens(tok(text, add_special_tokens=False).input_ids))
    return tok.convert_tokens_to_ids(list(pieces))


def trained(row: Any) -> list[int]:
    return [t for t, m in zip(row.response_ids, row.response_mask, strict=True) if m == 1]


def observed(row: Any) -> list[int]:
    return [t for t, m in zip(row.response_ids, row.response_mask, strict=True) if m == 0]


def test_turn_separators_and_tool_output_are_observations_in_one_row(smollm2: Any) -> None:
    _, tok = smollm2
    a1, a2, a3 = "3+4 is 7.", "Let me look that up", "It is 70."
    turn1 = [SYSTEM, {"role": "user", "content": QUESTIONS[0]}]
    turn2 = [*turn1, {"role": "assistant", "content": a1}, {"role": "tool", "content": "calculator: 70"}]
    turn3 = [*turn2, {"role": "assistant", "content": a2}, {"role": "user", "content": QUESTIONS[2]}]
    r1 = tok(a1, add_special_tokens=False).input_ids + [EOS]
    r2 = tok(a2, add_special_tokens=False).input_ids  # cut by max_tokens: no <|im_end|> sampled
    r3 = tok(a3, add_special_tokens=False).input_ids + [EOS]
    t = Trace()
    for prompt, response in ((chat_ids(tok, turn1), r1), (chat_ids(tok, turn2), r2), (chat_ids(tok, turn3), r3)):
        t.gateway(prompt, response)
    t.reward_event(1.0)
    out = adapt(t.attempt(), AdapterSettings())
    assert out.summary.prefix_mismatches == 0 and len(out.trajectories) == 1
    row = out.trajectories[0]
    assert trained(row) == r1 + r2 + r3
    first, second = tok.decode(observed(row)).split("<|im_start|>assistant\n")[:2]
    assert first == "\n<|im_start|>tool\ncalculator: 70<|im_end|>\n"  # after the sampled <|im_end|>
    assert second == "<|im_end|>\n<|im_start|>user\nSay it in words.<|im_end|>\n"  # the template closed the cut turn


def test_a_retokenized_reply_is_detected_counted_and_never_trained(smollm2: Any) -> None:
    _, tok = smollm2
    answer = "The answer is 7."
    sampled = spelled_out(tok, answer) + [EOS]
    assert tok.decode(sampled, skip_special_tokens=True) == answer  # the text the client sees and sends back
    assert tok(answer, add_special_tokens=False).input_ids != sampled[:-1]  # ... re-tokenizes to other ids
    turn1 = [SYSTEM, {"role": "user", "content": QUESTIONS[0]}]
    turn2 = [*turn1, {"role": "assistant", "content": answer}, {"role": "user", "content": QUESTIONS[1]}]
    p1, p2 = chat_ids(tok, turn1), chat_ids(tok, turn2)
    r2 = tok("It is 70.", add_special_tokens=False).input_ids + [EOS]
    t = Trace()
    t.gateway(p1, sampled)
    t.gateway(p2, r2)
    t.reward_event(1.0)
    out = adapt(t.attempt(), AdapterSettings())
    assert out.summary.prefix_mismatches == 1
    assert [r.after_mismatch for r in out.trajectories] == [False, True]
    assert [trained(r) for r in out.trajectories] == [sampled, r2]  # only sampled ids, each once
    assert out.trajectories[1].prompt_ids == p2  # the re-tokenized reply is context of the next row only


def learner_agrees(smollm2: Any, folder: Path, rows: list[Row], rollouts: list[str]) -> TorchActor:
    """The learner's logprobs of the stitched rows equal the recorded ones on every trained token (so its
    first PPO step sees ratio 1), and a step on two of them runs on SmolLM2 (a step on all is slow on 2 busy cores)."""
    model, tok = smollm2
    advantages = {r: (-1.0) ** i for i, r in enumerate(rollouts)}
    batch = collate(rows, advantages, tok.pad_token_id)
    with torch.no_grad():
        new = policy_logprobs(model, batch)
    on = batch.targets > 0
    assert int(on.sum()) == sum(sum(r.response_mask) for r in rows) > 0
    assert float((new - batch.old_logprobs)[on].abs().max()) <= 1e-4
    actor = TorchActor(Policy.load(LearnerSettings(model_dir=folder, lr=1e-5, kl_coef=0.0)))
    two = [rows[0], next(r for r in rows if r.rollout_id != rows[0].rollout_id)]
    stats = actor.update(two, advantages)
    assert stats["clip_fraction"] == 0.0 and abs(stats["approx_kl_old"]) <= 1e-6 and stats["grad_norm"] > 0
    return actor


async def served_after_swap(server: str, actor: TorchActor, out: Path, original: Path) -> None:
    """The updated weights (tied embeddings: no ``lm_head`` tensor) load into the server, which then answers with
    the learner's logprobs; the original weights are put back for the other tests."""
    model, tok = actor.policy.model, actor.policy.tok
    save_model_dir(model, tok, out)
    prompt = chat_ids(tok, [SYSTEM, {"role": "user", "content": QUESTIONS[0]}])
    async with httpx.AsyncClient(base_url=server, timeout=600) as http:
        try:
            swapped = await http.post("/update_weights", json={"path": str(out), "version": "smollm2:2"})
            assert swapped.status_code == 200, swapped.text
            body = {"model": MODEL, "prompt": prompt, "max_tokens": 8, "logprobs": 0, "return_token_ids": True}
            answer = (await http.post("/v1/completions", json=body)).json()
            assert answer["weight_version"] == "smollm2:2"
            choice = answer["choices"][0]
            expected = sequence_logprobs(model, prompt, choice["token_ids"])
            got = choice["logprobs"]["token_logprobs"]
            assert max(abs(a - b) for a, b in zip(got, expected, strict=True)) <= 1e-4
        finally:
            back = await http.post("/update_weights", json={"path": str(original), "version": "smollm2:1"})
            assert back.status_code == 200, back.text


async def converse(client: openai.AsyncOpenAI, seed: int) -> list[str]:
    """Three turns at temperature 1; each next prompt carries the replies as text, as any chat client does."""
    messages: list[Any] = [SYSTEM]
    replies = []
    for turn, question in enumerate(QUESTIONS):
        messages.append({"role": "user", "content": question})
        reply = await client.chat.completions.create(
            model="auto", messages=messages, max_tokens=24, temperature=1.0, seed=seed * 10 + turn
        )
        replies.append(reply.choices[0].message.content or "")
        messages.append({"role": "assistant", "content": replies[-1]})
    return replies


def attempt_of(calls: list[ModelCalled]) -> AttemptInput:
    rows = [
        CallRow(
            seq=i,
            call_id=c.call_id,
            resources_id=c.resources_id,
            model=c.model,
            prompt_ids=c.prompt_ids,
            response_ids=c.response_ids,
            logprobs=c.logprobs,
            status=c.status,
        )
        for i, c in enumerate(calls)
    ]
    reward = RewardRow(seq=len(rows), event_id="reward", value=1.0)
    return AttemptInput(rollout_id=calls[0].rollout_id, attempt_id=calls[0].attempt_id, calls=rows, rewards=[reward])


async def test_multi_turn_chats_through_the_gateway_train_only_sampled_tokens(
    make_gateway: GatewayFactory,
    store: Store,
    eventlog: EventLog,
    smollm2_server: str,
    smollm2: Any,
    smollm2_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, tok = smollm2
    g = await make_gateway(upstream=f"{smollm2_server}/v1", model_name=MODEL)
    rollouts = [g.rollout] + [await store.start_rollout({"chat": i}, mode="train") for i in range(1, 8)]
    clients = [
        openai.AsyncOpenAI(
            base_url=f"{g.url}/proxy/rollout/{r.rollout_id}/attempt/{r.attempt.attempt_id}/mode/train/openai/v1",
            api_key="x",
            timeout=600,
        )
        for r in rollouts
    ]
    texts = await asyncio.gather(*(converse(c, i) for i, c in enumerate(clients)))
    calls = await model_calls(eventlog, 3 * len(rollouts), timeout=120)
    assert len(calls) == 3 * len(rollouts)
    by_attempt = {r.attempt.attempt_id: [c for c in calls if c.attempt_id == r.attempt.attempt_id] for r in rollouts}
    mismatches = explained = 0
    rows: list[Row] = []
    for rollout, replies in zip(rollouts, texts, strict=True):
        chat = by_attempt[rollout.attempt.attempt_id]
        assert [tok.decode(c.response_ids, skip_special_tokens=True) for c in chat] == replies
        out = adapt(attempt_of(chat), AdapterSettings())
        assert [t for row in out.trajectories for t in trained(row)] == [t for c in chat for t in c.response_ids]
        mismatches += out.summary.prefix_mismatches
        for r in out.trajectories:
            rows.append(Row(rollout.rollout_id, r.prompt_ids, r.response_ids, r.response_mask, r.logprobs))
        for before, after in zip(chat, chat[1:], strict=False):
            context = before.prompt_ids + before.response_ids
            if after.prompt_ids[: len(context)] != context:
                text = tok.decode(before.response_ids, skip_special_tokens=True)
                sampled = [t for t in before.response_ids if t != EOS]
                explained += tok(text, add_special_tokens=False).input_ids != sampled
    continuations = 2 * len(rollouts)
    assert explained == mismatches  # every split is a reply whose re-tokenized text differs from its sampled ids
    assert mismatches < continuations  # stitching across ChatML turns works
    actor = learner_agrees(smollm2, smollm2_dir, rows, [r.rollout_id for r in rollouts])
    await served_after_swap(smollm2_server, actor, tmp_path / "step-1", smollm2_dir)
    with capsys.disabled():
        print(
            f"\nSmolLM2 multi-turn prefix mismatches: {mismatches} of {continuations} continuations "
            f"({100 * mismatches / continuations:.0f}%; {len(rollouts)} chats x 3 turns, temperature 1, 24 tokens)"
        )
