"""LoRA versions on the bus: the server merges each published adapter into its base and serves the logprobs
the learner recomputes with its peft model; the next adapter replaces the previous one (no drift), an
adapter of another base is refused, and full weights after adapters are served as before."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import torch

from voltbus.model import build_tokenizer, sequence_logprobs, weights_sha256
from voltbus.schemas.resources import LLM, WeightsRef
from voltbus.services.learner.grpo.actor import TorchActor
from voltbus.services.learner.grpo.lora import ADAPTER, base_of, ref_fields
from voltbus.services.learner.grpo.objective import Row
from voltbus.services.learner.grpo.policy import Policy
from voltbus.services.settings import LearnerSettings, NatsSettings
from voltbus.store import connect

from .conftest import MODEL
from .test_follow import BODY, until_stats

TOK = build_tokenizer()


def train(policy: Policy) -> None:
    """Two GRPO updates on two rollouts with opposite advantages."""
    p = TOK("2+2=").input_ids
    for _ in range(2):
        batch = []
        for rid, response in (("a", "4"), ("b", "5 no")):
            r = TOK(response, add_special_tokens=False).input_ids
            with torch.no_grad():
                batch.append(Row(rid, p, r, [1] * len(r), sequence_logprobs(policy.model, p, r)))
        TorchActor(policy).update(batch, {"a": 1.0, "b": -1.0})


def adapter_llm(file: Path) -> LLM:
    ref = WeightsRef(uri=f"file://{file}", sha256=weights_sha256(file), **ref_fields(file))
    return LLM(endpoint="http://x/v1", model=MODEL, weights=ref)


def gap(url: str, model) -> float:
    """Largest difference between the served logprobs of a sampled answer and ``model``'s recomputation."""
    choice = httpx.post(f"{url}/v1/completions", json=BODY, timeout=30).json()["choices"][0]
    with torch.no_grad():
        expected = sequence_logprobs(model, choice["prompt_token_ids"], choice["token_ids"])
    return max(abs(a - b) for a, b in zip(choice["logprobs"]["token_logprobs"], expected, strict=True))


async def test_adapters_are_merged_swapped_and_checked_against_their_base(
    make_server, nats_settings: NatsSettings, model_dirs: dict, reference: dict, tmp_path: Path
) -> None:
    s = LearnerSettings(model_dir=model_dirs[0], weights_dir=tmp_path, lora_rank=4, lr=1e-2)
    policy = Policy.load(s)
    files = []
    for step in range(2):
        train(policy)
        files.append(policy.save("run", step)[0])
    learner = [Policy.load(s, checkpoint=f.parent).model for f in files]  # each version, as a resume loads it
    assert base_of(files[0]) == weights_sha256(model_dirs[0])
    alien = policy.base_sha256 = "0" * 64
    files.append(policy.save("run", 2)[0])  # an adapter trained on other base weights
    assert files[-1].name == ADAPTER and base_of(files[-1]) == alien

    store = await connect(settings=nats_settings)
    try:
        url = await asyncio.to_thread(make_server, nats=nats_settings, follow_resources=True)
        for version in (1, 2):
            await store.update_resources("default", {"main_llm": adapter_llm(files[version - 1])})
            stats = await until_stats(url, "weight_version", f"default:{version}".__eq__)
            assert stats["last_swap_error"] is None and stats["weights_sha256"] == weights_sha256(files[version - 1])
            assert await asyncio.to_thread(gap, url, learner[version - 1]) <= 1e-4
            assert await asyncio.to_thread(gap, url, reference[0]) > 1e-3  # the adapter changed what is served
        assert await asyncio.to_thread(gap, url, learner[0]) > 1e-4  # adapter 2 replaced adapter 1, not added to it

        await store.update_resources("default", {"main_llm": adapter_llm(files[2])})
        failed = await until_stats(url, "last_swap_error", lambda error: error is not None)
        assert "default:3" in failed["last_swap_error"] and "base weights 000000000000" in failed["last_swap_error"]
        assert failed["weight_version"] == "default:2"

        full = WeightsRef(uri=f"file://{model_dirs[1] / 'model.safetensors'}", sha256=weights_sha256(model_dirs[1]))
        await store.update_resources("default", {"main_llm": LLM(endpoint="http://x/v1", model=MODEL, weights=full)})
        await until_stats(url, "weight_version", "default:4".__eq__)
        assert await asyncio.to_thread(gap, url, reference[1]) <= 1e-5
    finally:
        await store.close()
