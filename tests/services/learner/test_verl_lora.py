"""LoRA on the verl backend (``learner.lora_rank`` with ``backend=verl``), on verl's real engine: on CPU where
there is no GPU (``verl_cpu``). A version is the adapter the CPU learner writes (``grpo/lora.py``), so the
inference server's merge (``services/inference/adapter.py``) serves it unchanged. Marker ``verl``."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from voltbus.model import load_model_dir
from voltbus.schemas.resources import ProxyLLM
from voltbus.schemas.training import RunFinished, StepCompleted
from voltbus.services.clients.model import weights_sha256
from voltbus.services.inference.adapter import from_state, merge, metadata
from voltbus.services.learner.grpo import lora
from voltbus.services.learner.grpo.objective import Row, collate, policy_logprobs
from voltbus.services.learner.grpo.policy import OPTIMIZER
from voltbus.services.settings import LearnerSettings, NatsSettings, Settings
from voltbus.store import connect
from voltbus.trainer import GRPO, Trainer

from .agents import text_agent
from .runs import run_events
from .verl_checks import ADVANTAGES, rows_recorded_by

HAS_VERL = importlib.util.find_spec("verl") is not None
pytestmark = [
    pytest.mark.verl,
    pytest.mark.skipif(not HAS_VERL, reason="needs verl 0.9.1 (pip install 'voltbus[gpu]', or bash .ci/verl)"),
]
if HAS_VERL:
    from voltbus.services.learner.verl.actor import VerlActor

    from .verl_cpu import use_cpu_if_no_gpu

    DEVICE = use_cpu_if_no_gpu()


def lora_settings(policy_dir: Path, tmp_path: Path, **extra: object) -> LearnerSettings:
    return LearnerSettings(
        model_dir=policy_dir, weights_dir=tmp_path, lr=1e-2, micro_batch_size=2, backend="verl",
        lora_rank=4, lora_alpha=8, **extra,
    )  # fmt: skip


def served_logprobs(policy_dir: Path, adapter: Path | None, rows: list[Row]) -> dict[str, float]:
    """Each row's summed response logprob under the base, merged with ``adapter`` as ``voltbus inference`` does."""
    model, tok = load_model_dir(policy_dir)
    if adapter is not None:
        merge(model, {}, from_state(load_file(adapter), metadata(adapter)))
    batch = collate(rows, dict.fromkeys(ADVANTAGES, 0.0), tok.pad_token_id)
    with torch.no_grad():
        new = policy_logprobs(model, batch)
    return {r.rollout_id: float((new[i] * batch.targets[i]).sum()) for i, r in enumerate(rows)}


def test_a_lora_version_is_the_cpu_learners_adapter_and_moves_the_served_policy(
    policy_dir: Path, tmp_path: Path
) -> None:
    rows = rows_recorded_by(policy_dir)
    actor = VerlActor(lora_settings(policy_dir, tmp_path))
    trainable = [n for n, p in actor.worker.engine.module.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)  # the base is frozen
    actor.update(rows, ADVANTAGES)
    weights, sha = actor.save("run", 0)
    assert weights.name == lora.ADAPTER and sha == weights_sha256(weights)
    assert sorted(p.name for p in weights.parent.iterdir()) == ["adapter_config.json", lora.ADAPTER, OPTIMIZER]
    assert lora.ref_fields(weights) == {"format": "peft-lora", "base_sha256": weights_sha256(policy_dir)}
    state = load_file(weights)
    assert state and all(".lora_A." in k or ".lora_B." in k for k in state)
    assert weights.stat().st_size < (policy_dir / "model.safetensors").stat().st_size / 5
    before, after = served_logprobs(policy_dir, None, rows), served_logprobs(policy_dir, weights, rows)
    assert after["up"] > before["up"] and after["down"] < before["down"], (before, after)


def test_a_lora_version_resumes_with_its_adapter_and_optimizer(policy_dir: Path, tmp_path: Path) -> None:
    settings = lora_settings(policy_dir, tmp_path)
    rows = rows_recorded_by(policy_dir)
    first = VerlActor(settings)
    first.update(rows, ADVANTAGES)
    weights, _ = first.save("run", 0)
    assert weights.name == lora.ADAPTER
    second = VerlActor(settings, checkpoint=weights.parent)
    again, _ = second.save("run", 1)  # saved before any update: the adapter it resumed with
    saved, resumed = load_file(weights), load_file(again)
    assert saved.keys() == resumed.keys()
    assert all(torch.allclose(saved[k], resumed[k]) for k in saved)
    assert any(".lora_B." in k and float(v.abs().sum()) > 0 for k, v in saved.items())  # trained, not a fresh init
    state = second.worker.engine.optimizer.state_dict()["state"]
    assert state and all(float(s["step"]) == 1.0 for s in state.values())


def test_an_adapter_of_other_base_weights_is_refused(policy_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "other"
    model, _ = load_model_dir(policy_dir)
    lora.save(lora.wrap(model, LearnerSettings(lora_rank=4)), folder, "0" * 64)
    with pytest.raises(ValueError, match="trained on base weights 0{64}"):
        VerlActor(lora_settings(policy_dir, tmp_path), checkpoint=folder)


@pytest.mark.timeout(300)
def test_the_loop_trains_lora_with_backend_verl(nats_settings: NatsSettings, policy_dir: Path, tmp_path: Path) -> None:
    """Through the whole system: each version published as an adapter (``format='peft-lora'``), which the
    inference server following the bus merges (its calls carry each version)."""
    tasks = [{"id": f"t{i}", "a": i, "b": 1} for i in range(4)]
    algo = GRPO(
        model_dir=policy_dir, backend="verl", steps=2, tasks_per_step=2, group_size=3, weights_dir=tmp_path / "w",
        micro_batch_size=3, lr=1e-2, lora_rank=4,
    )  # fmt: skip
    result = Trainer(algorithm=algo, n_runners=6, settings=Settings(nats=nats_settings), say=print).fit(
        text_agent, tasks
    )
    events = asyncio.run(run_events(nats_settings, result["run_id"]))
    completed = [e for e in events if isinstance(e, StepCompleted)]
    assert [e.step for e in completed] == [0, 1] and all(e.metrics["rollouts_trained"] == 6 for e in completed)
    assert isinstance(events[-1], RunFinished) and events[-1].status == "succeeded"
    assert (tmp_path / "w" / result["run_id"] / "step-1" / lora.ADAPTER).is_file()
    refs = asyncio.run(published_refs(nats_settings, result["run_id"]))
    assert refs[0] == ("safetensors", None)  # version 1: the base
    assert refs[1:] == [("peft-lora", weights_sha256(policy_dir))] * 2


async def published_refs(nats_settings: NatsSettings, run_id: str) -> list[tuple[str, str | None]]:
    store = await connect(settings=nats_settings)
    try:
        versions = await store.resources_history(run_id)
    finally:
        await store.close()
    refs = []
    for update in versions:
        llm = update.resources["main_llm"]
        assert isinstance(llm, ProxyLLM) and llm.weights is not None
        refs.append((llm.weights.format, llm.weights.base_sha256))
    return refs
