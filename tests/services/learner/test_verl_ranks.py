"""verl's FSDP engine over two ranks (two processes under torchrun; gloo on CPU through ``verl_cpu``) against one
rank on the same batch: the same loss and gradient norm, and the same weights (or LoRA adapter) but for bf16
compute noise.

Marker ``verl``: run with ``pytest -m verl`` in the venv of ``.ci/verl``; skipped without verl."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from voltbus.services.learner.grpo.lora import ADAPTER

from .ranks_step import differences, run_step

pytestmark = [
    pytest.mark.verl,
    pytest.mark.skipif(importlib.util.find_spec("verl") is None, reason="needs verl 0.9.1 (bash .ci/verl)"),
]


@pytest.mark.timeout(900)  # two torchrun starts of verl's engine; slow on a loaded machine
def test_two_verl_ranks_give_the_update_of_one(policy_dir: Path, tmp_path: Path) -> None:
    one = run_step(policy_dir, tmp_path / "one", 1, 7, 1, 0.0, "verl")
    two = run_step(policy_dir, tmp_path / "two", 2, 7, 1, 0.0, "verl")  # 7 rows: rank 1 gets a filler row
    assert two["stats"]["tokens"] == one["stats"]["tokens"] == 31.0
    assert two["stats"]["loss"] == pytest.approx(one["stats"]["loss"], rel=1e-4)
    assert two["stats"]["grad_norm"] == pytest.approx(one["stats"]["grad_norm"], rel=2e-3)  # bf16 compute
    start = load_file(policy_dir / "model.safetensors")
    single, ranked = load_file(one["saved"]), load_file(two["saved"])
    moved, apart = differences(single, start), differences(ranked, single)
    assert float(moved.mean()) > 5e-4  # Adam's first step moves each weight by about lr (1e-3)
    # bf16 compute: a gradient near zero may change sign between the two runs and Adam then steps it by lr the
    # other way; measured 0.16% of the weights more than 1e-4 apart, mean 2e-6.
    assert float(apart.mean()) < 0.01 * float(moved.mean()) and float((apart > 1e-4).float().mean()) < 0.01


@pytest.mark.timeout(900)
def test_two_verl_ranks_train_the_lora_adapter_of_one(policy_dir: Path, tmp_path: Path) -> None:
    one = run_step(policy_dir, tmp_path / "one", 1, 7, 1, 0.0, "verl", lora=4)
    two = run_step(policy_dir, tmp_path / "two", 2, 7, 1, 0.0, "verl", lora=4)
    saved = Path(two["saved"])  # gathered from both ranks' shards, written by rank 0: the adapter only
    assert saved.name == ADAPTER and not (saved.parent / "model.safetensors").exists()
    assert two["stats"]["loss"] == pytest.approx(one["stats"]["loss"], rel=1e-4)
    assert two["stats"]["grad_norm"] == pytest.approx(one["stats"]["grad_norm"], rel=2e-3)  # bf16 compute
    single, ranked = load_file(one["saved"]), load_file(saved)
    assert single.keys() == ranked.keys() and all(".lora_A." in k or ".lora_B." in k for k in single)
    moved = torch.cat([single[k].abs().flatten() for k in single if ".lora_B." in k])  # B starts at 0
    apart = differences(ranked, single)
    assert float(moved.mean()) > 5e-4 and float(apart.mean()) < 0.01 * float(moved.mean())


@pytest.mark.timeout(900)
@pytest.mark.parametrize("lora", [0, 4], ids=["full", "lora"])
def test_two_verl_ranks_resumed_from_a_version_continue_as_if_never_stopped(
    policy_dir: Path, tmp_path: Path, lora: int
) -> None:
    through = run_step(policy_dir, tmp_path / "through", 2, 5, 1, 0.0, "verl", repeats=2, lora=lora)
    first = run_step(policy_dir, tmp_path / "first", 2, 5, 1, 0.0, "verl", lora=lora)
    again = run_step(
        policy_dir, tmp_path / "again", 2, 5, 1, 0.0, "verl", lora=lora, resume=Path(first["saved"]).parent
    )
    after_one, after_two, resumed = (load_file(r["saved"]) for r in (first, through, again))
    second_step = differences(after_two, after_one)
    assert float(second_step.mean()) > 1e-4  # the second update moved the weights
    # every rank read the version (weights or adapter, and the optimizer's state): the update of an unstopped run
    assert float(differences(resumed, after_two).mean()) < 0.01 * float(second_step.mean())
    assert again["stats"]["loss"] == pytest.approx(through["stats"]["loss"], rel=1e-4)
