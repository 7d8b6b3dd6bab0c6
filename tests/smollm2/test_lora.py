"""LoRA on SmolLM2-135M: a learner step on rows the server sampled trains only the adapter, its version is a small
file, and the server, given that file, serves the logprobs the learner recomputes with its peft model."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
import torch

from voltbus.model import sequence_logprobs
from voltbus.services.learner.grpo.actor import TorchActor
from voltbus.services.learner.grpo.objective import Row
from voltbus.services.learner.grpo.policy import Policy
from voltbus.services.settings import LearnerSettings

from .conftest import MODEL
from .test_fidelity import QUESTIONS, SYSTEM, chat_ids

pytestmark = [pytest.mark.smollm2, pytest.mark.timeout(900)]  # the first test may wait for the conversion


def gap(served: list[float], expected: list[float]) -> float:
    return max(abs(a - b) for a, b in zip(served, expected, strict=True))


async def test_a_lora_step_on_smollm2_is_served_merged(smollm2_dir: Path, smollm2_server: str, tmp_path: Path) -> None:
    policy = await asyncio.to_thread(
        Policy.load, LearnerSettings(model_dir=smollm2_dir, weights_dir=tmp_path, lora_rank=8, lr=1e-3)
    )
    prompt = chat_ids(policy.tok, [SYSTEM, {"role": "user", "content": QUESTIONS[0]}])
    body = {"model": MODEL, "prompt": prompt, "logprobs": 0, "return_token_ids": True}
    async with httpx.AsyncClient(base_url=smollm2_server, timeout=600) as http:
        sampled = (await http.post("/v1/completions", json={**body, "max_tokens": 12, "n": 2, "seed": 3})).json()
        rows = [
            Row(f"r{i}", prompt, c["token_ids"], [1] * len(c["token_ids"]), c["logprobs"]["token_logprobs"])
            for i, c in enumerate(sampled["choices"])
        ]
        base = {n: p.detach().clone() for n, p in policy.model.named_parameters() if "lora_" not in n}
        stats = await asyncio.to_thread(TorchActor(policy).update, rows, {"r0": 1.0, "r1": -1.0})
        assert stats["grad_norm"] > 0 and abs(stats["approx_kl_old"]) <= 1e-4  # the server sampled these rows
        assert all(torch.equal(p, base[n]) for n, p in policy.model.named_parameters() if n in base)
        file, sha = await asyncio.to_thread(policy.save, "run", 0)
        assert file.stat().st_size < (smollm2_dir / "model.safetensors").stat().st_size / 20
        greedy = {**body, "max_tokens": 8, "temperature": 0}
        try:
            swap = {"path": str(file), "version": "smollm2:lora", "sha256": sha}
            swapped = await http.post("/update_weights", json=swap)
            assert swapped.status_code == 200, swapped.text
            answer = (await http.post("/v1/completions", json=greedy)).json()
            assert answer["weight_version"] == "smollm2:lora"
            choice = answer["choices"][0]
            with torch.no_grad():
                expected = sequence_logprobs(policy.model, prompt, choice["token_ids"])
            assert gap(choice["logprobs"]["token_logprobs"], expected) <= 1e-4
            with torch.no_grad(), policy.model.disable_adapter():  # the base model: what the server served before
                unchanged = sequence_logprobs(policy.model, prompt, choice["token_ids"])
            assert gap(choice["logprobs"]["token_logprobs"], unchanged) > 1e-3  # the adapter changed what is served
        finally:
            back = await http.post("/update_weights", json={"path": str(smollm2_dir), "version": "smollm2:1"})
            assert back.status_code == 200, back.text
