"""What the verl actor must do, checked on whichever device verl trains on: CUDA for the ``gpu`` tests,
CPU (through ``verl_cpu``) for the ``verl`` tests. Needs verl; imported only by those test modules."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from voltbus.model import load_model_dir
from voltbus.schemas.training import RunFinished, StepCompleted
from voltbus.services.learner.grpo.objective import Row, collate, policy_logprobs
from voltbus.services.learner.grpo.policy import OPTIMIZER
from voltbus.services.learner.verl.actor import VerlActor
from voltbus.services.settings import LearnerSettings, NatsSettings, Settings
from voltbus.trainer import GRPO, Trainer

from .agents import text_agent
from .runs import run_events

RESPONSES = {"up": [5, 6, 7], "down": [8, 9, 10], "half": [5, 9, 7]}
ADVANTAGES = {"up": 1.0, "down": -1.0, "half": 0.5}


def sequence_logprobs(model_dir: Path, rows: list[Row]) -> dict[str, float]:
    """Each row's summed logprob of its response under the model directory's weights (fp32, CPU)."""
    model, tok = load_model_dir(model_dir)
    batch = collate(rows, dict.fromkeys(ADVANTAGES, 0.0), tok.pad_token_id)
    with torch.no_grad():
        new = policy_logprobs(model, batch)
    return {r.rollout_id: float((new[i] * batch.targets[i]).sum()) for i, r in enumerate(rows)}


def rows_recorded_by(model_dir: Path) -> list[Row]:
    """Three responses to one prompt, with the logprobs the starting model gives them (as if it sampled them)."""
    model, tok = load_model_dir(model_dir)
    prompt = [1, 11, 12, 13]
    rows = [Row(rid, prompt, ids, [1] * len(ids), [0.0] * len(ids)) for rid, ids in RESPONSES.items()]
    batch = collate(rows, ADVANTAGES, tok.pad_token_id)
    with torch.no_grad():
        new = policy_logprobs(model, batch)
    start = len(prompt) - 1
    return [
        Row(r.rollout_id, r.prompt_ids, r.response_ids, r.response_mask, new[i, start : start + 3].tolist())
        for i, r in enumerate(rows)
    ]


def check_update(model_dir: Path, tmp_path: Path, lr: float = 1e-3) -> None:
    """One update: verl's loss equals the CPU loss at ratio 1 (-Σ weight × advantage = -0.5/3 here), and
    the saved version raises the positive response's logprob and lowers the negative one's."""
    settings = LearnerSettings(model_dir=model_dir, weights_dir=tmp_path, lr=lr, micro_batch_size=2, backend="verl")
    rows = rows_recorded_by(model_dir)
    actor = VerlActor(settings)
    stats = actor.update(rows, ADVANTAGES)
    assert stats["loss"] == pytest.approx(-0.5 / 3, rel=0.05)  # bf16 compute: ratios are 1 within ~1%
    assert stats["clip_fraction"] == 0.0 and stats["tokens"] == 9.0 and stats["grad_norm"] > 0
    weights, sha = actor.save("run", 0)
    assert weights.name == "model.safetensors" and len(sha) == 64 and (weights.parent / OPTIMIZER).is_file()
    before, after = sequence_logprobs(model_dir, rows), sequence_logprobs(weights.parent, rows)
    assert after["up"] > before["up"] and after["down"] < before["down"], (before, after)


def check_resume(model_dir: Path, tmp_path: Path) -> None:
    """A version saved by one actor is where the next one starts: same weights, optimizer state restored."""
    settings = LearnerSettings(model_dir=model_dir, weights_dir=tmp_path, lr=1e-3, micro_batch_size=3, backend="verl")
    rows = rows_recorded_by(model_dir)
    first = VerlActor(settings)
    first.update(rows, ADVANTAGES)
    weights, _ = first.save("run", 0)
    second = VerlActor(settings, checkpoint=weights.parent)
    state = second.worker.engine.optimizer.state_dict()["state"]
    assert state and all(float(s["step"]) == 1.0 for s in state.values())
    saved = load_file(weights)
    resumed, _ = second.worker.engine.get_per_tensor_param()
    for name, tensor in resumed:
        if name in saved:
            assert torch.allclose(tensor.float().cpu(), saved[name].float()), name
    second.update(rows, ADVANTAGES)
    again, _ = second.save("run", 1)
    assert (weights.parent / OPTIMIZER).is_file()  # still the last recorded checkpoint until step 1 is
    second.update(rows, ADVANTAGES)
    third, _ = second.save("run", 2)
    assert not (weights.parent / OPTIMIZER).is_file()  # the two newest versions keep their optimizer state
    assert (again.parent / OPTIMIZER).is_file() and (third.parent / OPTIMIZER).is_file()


def check_kl(model_dir: Path, tmp_path: Path) -> None:
    """With ``kl_coef``, the reference engine gives the starting policy's logprobs: the KL is about 0 on
    the first update (the policy is the reference) and grows once the policy moved."""
    settings = LearnerSettings(
        model_dir=model_dir, weights_dir=tmp_path, lr=1e-3, kl_coef=0.5, micro_batch_size=2, backend="verl"
    )
    rows = rows_recorded_by(model_dir)
    actor = VerlActor(settings)
    first = actor.update(rows, ADVANTAGES)
    second = actor.update(rows, ADVANTAGES)
    assert abs(first["kl_ref"]) < 1e-3 and second["kl_ref"] > 10 * max(abs(first["kl_ref"]), 1e-6), (first, second)
    assert second["loss"] != second["pg_loss"]  # the KL term is in the loss


def check_loop(nats_settings: NatsSettings, model_dir: Path, tmp_path: Path) -> None:
    """The learner loop with backend verl through the whole system: steps recorded with verl's metrics,
    each version published from the file VerlActor saved."""
    tasks = [{"id": f"t{i}", "a": i, "b": 1} for i in range(4)]
    algo = GRPO(
        model_dir=model_dir, backend="verl", steps=2, tasks_per_step=2, group_size=3,
        weights_dir=tmp_path / "w", micro_batch_size=3, lr=1e-4,
    )  # fmt: skip
    result = Trainer(algorithm=algo, n_runners=6, settings=Settings(nats=nats_settings), say=print).fit(
        text_agent, tasks
    )
    events = asyncio.run(run_events(nats_settings, result["run_id"]))
    completed = [e for e in events if isinstance(e, StepCompleted)]
    assert [e.step for e in completed] == [0, 1]
    for e in completed:
        assert e.metrics["rollouts_trained"] == 6 and e.metrics["tokens"] > 0
        assert {"loss", "clip_fraction", "approx_kl_old", "grad_norm"} <= set(e.metrics)
    assert isinstance(events[-1], RunFinished) and events[-1].status == "succeeded"
    assert (tmp_path / "w" / result["run_id"] / "step-1" / "model.safetensors").is_file()


class VerlChecks:
    """The checks as tests, for a test module to subclass under its own marks (``verl`` on CPU, ``gpu``)."""

    def test_one_update_raises_the_positive_response(self, policy_dir: Path, tmp_path: Path) -> None:
        check_update(policy_dir, tmp_path)

    def test_a_saved_version_resumes_with_its_optimizer(self, policy_dir: Path, tmp_path: Path) -> None:
        check_resume(policy_dir, tmp_path)

    def test_the_kl_term_uses_the_starting_policy(self, policy_dir: Path, tmp_path: Path) -> None:
        check_kl(policy_dir, tmp_path)

    @pytest.mark.timeout(300)
    def test_the_loop_trains_with_backend_verl(
        self, nats_settings: NatsSettings, policy_dir: Path, tmp_path: Path
    ) -> None:
        check_loop(nats_settings, policy_dir, tmp_path)
