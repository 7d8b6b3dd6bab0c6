"""The CPU learner's update, data parallel over two ranks (two processes under torchrun, gloo), against one rank on
the same batch: the same weights within float tolerance, and the same on every rank; with LoRA (a version is the
adapter only); and two ranks resumed from a saved version continue as an uninterrupted run does."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from voltbus.model import build_tiny_model, build_tokenizer, save_model_dir, weights_sha256
from voltbus.services.learner.grpo.lora import ADAPTER, FORMAT, ref_fields
from voltbus.services.learner.grpo.policy import WEIGHTS

from .ranks_step import differences, run_step

pytestmark = pytest.mark.long  # two ranks under torchrun: 10-45 s each (pytest -m long; .ci/run runs them)


@pytest.mark.timeout(600)  # two torchrun starts; slow on a loaded machine
@pytest.mark.parametrize(("rows", "epochs", "kl"), [(7, 2, 0.1), (1, 1, 0.0)], ids=["7-rows-kl", "1-row"])
def test_two_ranks_give_the_update_of_one(policy_dir: Path, tmp_path: Path, rows: int, epochs: int, kl: float) -> None:
    one = run_step(policy_dir, tmp_path / "one", 1, rows, epochs, kl)
    two = run_step(policy_dir, tmp_path / "two", 2, rows, epochs, kl)
    start = load_file(policy_dir / "model.safetensors")
    single = load_file(one["saved"])
    rank0, rank1 = load_file(two["saved"]), load_file(tmp_path / "two" / "rank-1.safetensors")
    moved = differences(single, {k: start.get(k, single[k]) for k in single})
    assert float(moved.mean()) > 5e-4  # each epoch moves a weight by about lr (1e-3): Adam's first steps
    # The float sums differ in order, and Adam turns a near-zero gradient's noise into a step of up to lr: a few
    # weights in 10^5 differ by ~1e-5 (one by 1.1e-4 once the output layer ran at the sampled positions only),
    # the rest by ~1e-9 (measured). Summing gradients over the wrong rows, or only rank 0's, moves every weight
    # differently: the mean catches it.
    apart = differences(rank0, single)
    assert float(apart.max()) < 5e-4 and float(apart.mean()) < 1e-7
    assert (
        float(differences(rank0, {k: rank1[k] for k in rank0}).max()) == 0.0
    )  # every rank stepped with the same summed gradient
    assert two["stats"]["tokens"] == one["stats"]["tokens"]
    for key in ("loss", "grad_norm", "clip_fraction", "approx_kl_old", *(["kl_ref"] if kl else [])):
        assert two["stats"][key] == pytest.approx(one["stats"][key], rel=1e-4, abs=1e-6), key


@pytest.mark.timeout(600)
def test_a_lora_update_on_two_ranks_is_the_one_of_one_rank(policy_dir: Path, tmp_path: Path) -> None:
    one = run_step(policy_dir, tmp_path / "one", 1, 7, 2, 0.1, lora=4)
    two = run_step(policy_dir, tmp_path / "two", 2, 7, 2, 0.1, lora=4)
    for saved in (Path(one["saved"]), Path(two["saved"])):  # a version is the adapter only, as with one rank
        assert saved.name == ADAPTER and not (saved.parent / WEIGHTS).exists()
        assert ref_fields(saved) == {"format": FORMAT, "base_sha256": weights_sha256(policy_dir)}
    single, rank0 = load_file(one["saved"]), load_file(two["saved"])
    rank1 = load_file(tmp_path / "two" / "rank-1.safetensors")
    assert single.keys() and all(".lora_A." in k or ".lora_B." in k for k in single)
    moved = torch.cat([single[k].abs().flatten() for k in single if ".lora_B." in k])  # B starts at 0
    assert float(moved.mean()) > 5e-4
    apart = differences(rank0, single)
    assert float(apart.max()) < 5e-4 and float(apart.mean()) < 1e-6
    assert float(differences(rank0, rank1).max()) == 0.0  # every rank stepped with the same summed gradient
    assert two["stats"]["tokens"] == one["stats"]["tokens"]
    for key in ("loss", "grad_norm", "clip_fraction", "approx_kl_old", "kl_ref"):
        assert two["stats"][key] == pytest.approx(one["stats"][key], rel=1e-4, abs=1e-6), key


@pytest.mark.timeout(600)
@pytest.mark.parametrize("lora", [0, 4], ids=["full", "lora"])
def test_two_ranks_resumed_from_a_version_continue_as_if_never_stopped(
    policy_dir: Path, tmp_path: Path, lora: int
) -> None:
    through = run_step(policy_dir, tmp_path / "through", 2, 5, 1, 0.0, repeats=2, lora=lora)
    first = run_step(policy_dir, tmp_path / "first", 2, 5, 1, 0.0, lora=lora)
    resumed = run_step(policy_dir, tmp_path / "again", 2, 5, 1, 0.0, lora=lora, resume=Path(first["saved"]).parent)
    after_one, after_two = load_file(first["saved"]), load_file(through["saved"])
    assert float(differences(after_one, after_two).mean()) > 1e-4  # the second update moved the weights
    # rank 0 read the version (weights and Adam's state) and gave it to rank 1: the same update as without the stop
    assert float(differences(load_file(resumed["saved"]), after_two).max()) < 1e-6
    rank1 = load_file(tmp_path / "again" / "rank-1.safetensors")
    assert float(differences({k: rank1[k] for k in after_two}, after_two).max()) < 1e-6
    assert resumed["stats"]["loss"] == pytest.approx(through["stats"]["loss"], rel=1e-5, abs=1e-7)


@pytest.mark.timeout(600)
def test_lora_ranks_that_loaded_different_base_weights_refuse_to_train(policy_dir: Path, tmp_path: Path) -> None:
    other = save_model_dir(build_tiny_model(1), build_tokenizer(), tmp_path / "other")
    failed = run_step(policy_dir, tmp_path / "two", 2, 3, 1, 0.0, lora=4, other_model=other, fails=True)
    # each rank loads the base itself (only the adapter is sent): a rank on another base would train another model
    refused = f"rank 1 loaded base weights {weights_sha256(other)}, rank 0 {weights_sha256(policy_dir)}"
    assert refused in failed["output"]
