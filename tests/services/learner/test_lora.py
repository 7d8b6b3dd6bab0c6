"""LoRA on the CPU learner (tiny model): a GRPO step moves only the adapter (the base stays bit-identical), a
version holds only the adapter's tensors (a small file, marked as an adapter of its base), a resume loads
it back, LoRA off is the full-weights path as before, and LoRA where it is not built is refused."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from voltbus.model import build_tokenizer, sequence_logprobs, weights_sha256
from voltbus.services.learner.backend import check_backend
from voltbus.services.learner.grpo.actor import TorchActor
from voltbus.services.learner.grpo.lora import ADAPTER, FORMAT, BaseView, ref_fields
from voltbus.services.learner.grpo.objective import Row
from voltbus.services.learner.grpo.policy import OPTIMIZER, WEIGHTS, Policy, version_file
from voltbus.services.learner.session import LearnerError
from voltbus.services.settings import LearnerSettings, Settings

TOK = build_tokenizer()


def rows(model) -> list[Row]:
    """Two rollouts of one task with opposite advantages (sampled from ``model``: ratio 1)."""
    out = []
    for rid, response in (("a", "3"), ("b", "4 no")):
        p, r = TOK("1+2=").input_ids, TOK(response, add_special_tokens=False).input_ids
        with torch.no_grad():
            out.append(Row(rid, p, r, [1] * len(r), sequence_logprobs(model, p, r)))
    return out


def settings(policy_dir: Path, tmp_path: Path, rank: int = 4) -> LearnerSettings:
    return LearnerSettings(model_dir=policy_dir, weights_dir=tmp_path, lora_rank=rank, lr=1e-2)


def test_a_lora_step_changes_only_the_adapter(policy_dir: Path, tmp_path: Path) -> None:
    policy = Policy.load(settings(policy_dir, tmp_path))
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    adapter = {n for n in before if "lora_" in n}
    assert adapter and all(p.requires_grad == (n in adapter) for n, p in policy.model.named_parameters())
    trained = {id(p) for group in policy.optimizer.param_groups for p in group["params"]}
    assert trained == {id(p) for n, p in policy.model.named_parameters() if n in adapter}

    stats = TorchActor(policy).update(rows(policy.model), {"a": 1.0, "b": -1.0})

    after = dict(policy.model.named_parameters())
    assert stats["grad_norm"] > 0
    assert all(torch.equal(before[n], after[n]) for n in before if n not in adapter)  # the base: bit-identical
    assert any(not torch.equal(before[n], after[n]) for n in adapter if "lora_B" in n)  # B starts at 0 and moved


def test_a_lora_version_holds_only_the_adapter_and_resumes(policy_dir: Path, tmp_path: Path) -> None:
    s = settings(policy_dir, tmp_path)
    policy = Policy.load(s)
    TorchActor(policy).update(rows(policy.model), {"a": 1.0, "b": -1.0})
    file, sha = policy.save("run", 0)
    folder = file.parent
    assert file.name == ADAPTER and sha == weights_sha256(file) and version_file(folder) == file
    assert not (folder / WEIGHTS).exists() and (folder / "adapter_config.json").is_file()
    with safe_open(file, "pt") as f:
        names = list(f.keys())
    assert names and all(".lora_A." in n or ".lora_B." in n for n in names)
    assert file.stat().st_size < (policy_dir / WEIGHTS).stat().st_size / 10  # rank 4 on a 1M-parameter model
    assert ref_fields(file) == {"format": FORMAT, "base_sha256": weights_sha256(policy_dir)}

    resumed = Policy.load(s, checkpoint=folder)
    assert resumed.optimizer.state_dict()["state"].keys() == policy.optimizer.state_dict()["state"].keys()
    mine, theirs = dict(policy.model.named_parameters()), dict(resumed.model.named_parameters())
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[n], theirs[n]) for n in mine)


def test_an_adapter_for_another_base_is_not_resumed(policy_dir: Path, tmp_path: Path) -> None:
    policy = Policy.load(settings(policy_dir, tmp_path))
    folder = policy.save("run", 0)[0].parent
    policy.base_sha256 = "0" * 64  # as if the model directory had changed since
    policy.save("run", 1)
    with pytest.raises(ValueError, match="trained on base weights 0000"):
        Policy.load(settings(policy_dir, tmp_path), checkpoint=folder.parent / "step-1")


def test_the_kl_reference_of_a_lora_policy_is_its_base_without_a_copy(policy_dir: Path, tmp_path: Path) -> None:
    s = settings(policy_dir, tmp_path).model_copy(update={"kl_coef": 0.1})
    policy = Policy.load(s)
    assert isinstance(policy.reference, BaseView) and policy.reference.model is policy.model
    actor, batch = TorchActor(policy), rows(policy.model)
    first = actor.update(batch, {"a": 1.0, "b": -1.0})
    assert abs(first["kl_ref"]) < 1e-7  # B starts at 0: the policy is its base
    assert actor.update(batch, {"a": 1.0, "b": -1.0})["kl_ref"] > 1e-6  # the adapter moved away from the base
    assert any("lora_" in n for n, _ in policy.model.named_parameters())  # disable_adapter() left them in place


def test_lora_off_trains_and_saves_full_weights(policy_dir: Path, tmp_path: Path) -> None:
    policy = Policy.load(settings(policy_dir, tmp_path, rank=0))
    assert not any("lora_" in n for n, _ in policy.model.named_parameters())
    trained = [p for group in policy.optimizer.param_groups for p in group["params"]]
    assert len(trained) == len(list(policy.model.parameters()))
    file, _ = policy.save("run", 0)
    assert file.name == WEIGHTS and (file.parent / OPTIMIZER).is_file() and ref_fields(file) == {}


def test_lora_with_vllm_pushes_and_overlap_is_refused() -> None:
    check_backend(LearnerSettings(lora_rank=8, vllm_urls=["http://x"]))  # built: vllm/lora.py
    with pytest.raises(LearnerError, match="learner.vllm_urls and learner.overlap is not built"):
        check_backend(LearnerSettings(lora_rank=8, vllm_urls=["http://x"], overlap=True))


@pytest.mark.skipif(importlib.util.find_spec("verl") is not None, reason="verl is installed: the backend is built")
def test_lora_on_the_verl_backend_is_refused_only_for_verl_itself() -> None:
    with pytest.raises(LearnerError, match="learner.backend 'verl' needs verl"):  # not for LoRA
        check_backend(LearnerSettings(lora_rank=8, backend="verl"))


def test_a_fixed_gateway_model_name_with_lora_on_vllm_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    lora_on_vllm = {"lora_rank": 8, "vllm_urls": ["http://127.0.0.1:9"]}
    with pytest.raises(ValueError, match="would reach the base model"):
        Settings(learner=lora_on_vllm, gateway={"model_name": "policy"})
    monkeypatch.setenv("VOLTBUS_GATEWAY__MODEL_NAME", "policy")
    monkeypatch.setenv("VOLTBUS_LEARNER__LORA_RANK", "8")
    monkeypatch.setenv("VOLTBUS_LEARNER__VLLM_URLS", "http://127.0.0.1:9")
    with pytest.raises(ValueError, match="each LoRA version under its own model name"):
        Settings()
    monkeypatch.delenv("VOLTBUS_GATEWAY__MODEL_NAME")
    assert Settings().learner.lora_rank == 8  # unset: the agents' own model names go through
    monkeypatch.delenv("VOLTBUS_LEARNER__VLLM_URLS")
    Settings(learner={"lora_rank": 8}, gateway={"model_name": "policy"})  # voltbus inference: one name for all


def test_run_ppo_refuses_lora_on_vllm_before_anything_starts() -> None:
    from voltbus.verl.entrypoint import run_ppo

    config = {"algorithm": {"adv_estimator": "grpo"}, "agentlightning": {"local": {"agent_class": "json:dumps"}}}
    settings = Settings(learner={"lora_rank": 8, "vllm_urls": ["http://127.0.0.1:9"]})
    with pytest.raises(ValueError, match="would reach the base model"):
        run_ppo(config, [{"q": 1}], [{"q": 2}], settings=settings, backend="torch")
