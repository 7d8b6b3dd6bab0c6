"""The CPU learner's update, data parallel over two ranks (two processes under torchrun, gloo), against one rank on
the same batch: the same weights within float tolerance, and the same on every rank."""

from __future__ import annotations

from pathlib import Path

import pytest
from safetensors.torch import load_file

from .ranks_step import differences, run_step


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
