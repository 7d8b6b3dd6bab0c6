"""``bash .ci/gpu`` (the GPU run in one command) on a machine without a CUDA GPU: it stops at once with exit 2
and a message saying what it needs, before installing anything; the run's driver parses its arguments; the choice of
the largest model that fits (``.ci/gpu_models.py``) on fake model directories (a config and safetensors headers);
the 1 vs N ranks decision (``.ci/gpu_ranks.py``); the script's steps, with a stand-in python that records them."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from voltbus.model import build_tiny_model, build_tokenizer, save_model_dir
from voltbus.services.settings import NatsSettings, Settings
from voltbus.trainer.example import load_module

ROOT = Path(__file__).resolve().parent.parent
GIB = 1 << 30
MODELS = load_module(ROOT / ".ci" / "gpu_models.py", "voltbus_ci_gpu_models")
RANKS = load_module(ROOT / ".ci" / "gpu_ranks.py", "voltbus_ci_gpu_ranks")


def safetensors_header(path: Path, shapes: dict[str, list[int]], dtype: str = "BF16") -> None:
    """A safetensors file's header alone (the tensors' bytes left out: only the header is read)."""
    header = json.dumps({n: {"dtype": dtype, "shape": s, "data_offsets": [0, 0]} for n, s in shapes.items()})
    path.write_bytes(struct.pack("<Q", len(header)) + header.encode())


def fake_model(folder: Path, shards: list[dict[str, list[int]]], dtype: str = "BF16") -> Path:
    """A model directory: config.json and one safetensors file, or shards and their index."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    if len(shards) == 1:
        safetensors_header(folder / "model.safetensors", shards[0], dtype)
        return folder
    weight_map = {}
    for i, shapes in enumerate(shards, start=1):
        name = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        safetensors_header(folder / name, shapes, dtype)
        weight_map.update(dict.fromkeys(shapes, name))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder


@pytest.fixture
def three_models(tmp_path: Path) -> dict[str, Path]:
    """1 M parameters in fp32, 100 M in bf16, and 1 B in bf16 over two shards."""
    return {
        "small": fake_model(tmp_path / "small", [{"w": [1000, 1000]}], "F32"),
        "mid": fake_model(tmp_path / "mid", [{"w": [10000, 10000]}]),
        "big": fake_model(tmp_path / "big", [{"a": [20000, 25000]}, {"b": [25000, 20000]}]),
    }


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU may be here: no refusal")
def test_without_a_cuda_gpu_the_gpu_script_fails_fast_and_clearly(tmp_path: Path) -> None:
    copy = tmp_path / "repo"
    (copy / ".ci").mkdir(parents=True)
    shutil.copy2(ROOT / ".ci" / "gpu", copy / ".ci" / "gpu")  # a copy: whatever it did would show here
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(copy / ".ci" / "gpu")], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2, done.stderr
    assert "no CUDA GPU here" in done.stderr and "bash .ci/verl" in done.stderr and done.stdout == ""
    assert sorted(p.name for p in copy.iterdir()) == [".ci"]  # no venv made, nothing installed or fetched


def test_a_nvidia_smi_that_lists_no_gpu_is_no_gpu(tmp_path: Path) -> None:
    fake = tmp_path / "nvidia-smi"  # the outer edge: a driver installed without a device
    fake.write_text("#!/bin/sh\necho 'No devices were found'\nexit 6\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(ROOT / ".ci" / "gpu")], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "no CUDA GPU here" in done.stderr


def test_the_run_driver_needs_a_model_directory() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "gpu_run.py")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and "--model" in done.stderr


def test_the_run_driver_trains_and_reports_its_figures_on_cpu(nats_settings: NatsSettings, tmp_path: Path) -> None:
    """The GPU run's driver with the CPU backend and device (the figures' arithmetic, not the GPU's speed)."""
    policy_dir = save_model_dir(build_tiny_model(0), build_tokenizer(), tmp_path / "tiny")
    run = load_module(ROOT / ".ci" / "gpu_run.py", "voltbus_ci_gpu_run")
    assert run.tasks(3, 1) == run.tasks(3, 1) != run.tasks(3, 2)
    argv = ["--model", str(policy_dir), "--backend", "torch", "--device", "cpu", "--steps", "1", "--val", "2"]
    argv += ["--tasks-per-step", "2", "--group-size", "2", "--runners", "4", "--out", str(tmp_path / "f.json")]
    figures = run.main(argv, Settings(nats=nats_settings))
    assert json.loads((tmp_path / "f.json").read_text()) == figures
    assert figures["steps"] == 1 and 0 <= figures["reward_before"] <= 1 and 0 <= figures["reward_after"] <= 1
    assert figures["trained_tokens"] > 0 and figures["sampling_tokens_per_s"] > 0 and figures["update_tokens_per_s"] > 0


def test_a_model_directory_is_measured_from_its_safetensors_headers(three_models: dict[str, Path]) -> None:
    big = MODELS.measure(three_models["big"])
    assert (big.params, big.stored_bytes) == (10**9, 2 * 10**9)
    small = MODELS.measure(three_models["small"])
    assert (small.params, small.stored_bytes) == (10**6, 4 * 10**6)
    (three_models["big"] / "model-00002-of-00002.safetensors").unlink()  # a shard missing: not a usable model
    (three_models["mid"] / "config.json").unlink()
    assert MODELS.measure(three_models["big"]) is None and MODELS.measure(three_models["mid"]) is None


def test_the_largest_model_whose_training_fits_is_picked_and_the_others_said(three_models: dict[str, Path]) -> None:
    found = [MODELS.measure(p) for p in three_models.values()]
    # full: 16 bytes per parameter + the stored weights, x1.25, + 2 GiB: 1 B needs 23.0 GiB, 100 M 4.1 GiB
    chosen, reasons = MODELS.choose(found, 10 * GIB, "full")
    assert chosen.path == three_models["mid"]
    assert reasons[0].startswith(f"skipped: {three_models['big']} (1,000 M parameters, full training needs 23.0 GiB")
    assert reasons[1].startswith(f"picked: {three_models['mid']}") and reasons[2].startswith("smaller:")
    chosen, reasons = MODELS.choose(found, 10 * GIB, "lora")  # LoRA: 4 bytes per parameter, 1 B needs 9.0 GiB
    assert chosen.path == three_models["big"] and reasons[0].startswith("picked:") and "9.0 GiB" in reasons[0]
    chosen, reasons = MODELS.choose(found, GIB, "full")
    assert chosen is None and len(reasons) == 3
    assert all(r.startswith("skipped: ") and r.endswith(", 1.0 GiB free)") for r in reasons)


def test_candidates_come_from_the_hf_cache_the_env_var_and_the_given_dirs(tmp_path: Path) -> None:
    hub = tmp_path / "hf" / "hub"
    snapshot = fake_model(hub / "models--org--m" / "snapshots" / "abc", [{"w": [4, 4]}])
    listed = fake_model(tmp_path / "listed", [{"w": [4, 4]}])
    given = fake_model(tmp_path / "given", [{"w": [4, 4]}])
    env = {"HF_HOME": str(tmp_path / "hf"), "VOLTBUS_GPU_MODELS": f"{listed}{os.pathsep}{given}"}
    assert MODELS.discover([given], env, tmp_path / "home") == [given, listed, snapshot]
    home_hub = fake_model(tmp_path / "home" / ".cache" / "huggingface" / "hub" / "models--a--b" / "snapshots" / "1",
                          [{"w": [4, 4]}])  # fmt: skip
    assert MODELS.discover([], {}, tmp_path / "home") == [home_hub]


def test_model_auto_says_what_it_picked_and_without_cuda_what_it_needs(
    three_models: dict[str, Path], tmp_path: Path
) -> None:
    env = {**os.environ, "HF_HOME": str(tmp_path / "none"), "VOLTBUS_GPU_MODELS": str(three_models["small"])}
    script = [sys.executable, str(ROOT / ".ci" / "gpu_models.py")]
    done = subprocess.run([*script, "--free-gib", "10", "--mode", "lora", str(three_models["mid"])], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0 and done.stdout == f"{three_models['mid']}\n", done.stderr
    assert done.stderr.splitlines()[0].startswith(f"model auto (lora): picked: {three_models['mid']}")
    assert "model auto (lora): smaller: " in done.stderr
    done = subprocess.run([*script, "--free-gib", "1"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "no model's full training fits 1.0 GiB free" in done.stderr
    if not shutil.which("nvidia-smi"):
        done = subprocess.run([*script], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and "--model auto needs a CUDA GPU" in done.stderr, done.stderr
        run = [sys.executable, str(ROOT / ".ci" / "gpu_run.py"), "--model", "auto"]
        done = subprocess.run(run, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and "--model auto needs a CUDA GPU" in done.stderr, done.stderr


def test_several_gpus_are_compared_with_one_and_a_single_gpu_is_said_skipped() -> None:
    one = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n"
    assert RANKS.plan("") == (0, "ranks: skipped the 1 vs N ranks comparison: nvidia-smi lists 0 GPUs; data "
                                 "parallel over torchrun's ranks (NCCL) needs 2 or more")  # fmt: skip
    ranks, message = RANKS.plan(one)
    assert ranks == 0 and "lists 1 GPU;" in message
    ranks, message = RANKS.plan(one + "  MIG 1g.10gb Device 0: (UUID: MIG-1)\nGPU 1: NVIDIA H100 (UUID: GPU-2)\n")
    assert ranks == 2 and message.endswith("on 1 rank, then on 2 ranks (torchrun, NCCL)")
    assert RANKS.per_update({"seconds": [9.0, 2.0, 4.0]}) == 3.0 and RANKS.per_update({"seconds": [5.0]}) == 5.0
    assert RANKS.main(["--model", "m"], one) == {}


def test_the_script_runs_the_tests_both_passes_and_the_ranks_step(tmp_path: Path) -> None:
    """``.ci/gpu`` with a stand-in nvidia-smi listing two GPUs and a stand-in python that records its calls."""
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: A (UUID: 1)'\necho 'GPU 1: A (UUID: 2)'\n")
    fake = tmp_path / "python"  # the model choice answers with a directory, the ranks step records its stdin
    record = f'echo "$*" | tr "\\n" " " >> {tmp_path}/calls; echo >> {tmp_path}/calls'
    answer = f'case "$*" in *gpu_models.py*) echo /m/$3;; *gpu_ranks.py*) cat >> {tmp_path}/calls;; esac'
    fake.write_text(f"#!/bin/bash\n{record}\n{answer}\n")
    for f in (fake, tmp_path / "nvidia-smi"):
        f.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "VOLTBUS_GPU_PYTHON": str(fake)}
    done = subprocess.run(["bash", str(ROOT / ".ci" / "gpu")], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    calls = [c.strip() for c in (tmp_path / "calls").read_text().splitlines()]
    steps = [c.split()[0] for c in calls if not c.startswith("-c ")]
    assert steps == [".ci/gpu_models.py"] * 2 + ["-m"] + [".ci/gpu_run.py"] * 2 + [".ci/gpu_ranks.py", "GPU", "GPU"]
    models, models_lora, tests, full, lora, ranks = [c for c in calls if not c.startswith(("-c ", "GPU "))]
    assert models.startswith(".ci/gpu_models.py --mode full") and models_lora.startswith(
        ".ci/gpu_models.py --mode lora"
    )
    assert ranks.startswith(".ci/gpu_ranks.py --model /m/full")
    assert "test_vllm_push_gpu.py" in tests and "--model /m/full" in full and "--lora-rank" not in full
    assert "--model /m/lora --lora-rank 16" in lora


@pytest.mark.long  # two torchrun starts: 10-45 s each (pytest -m long)
@pytest.mark.timeout(600)
def test_the_ranks_comparison_times_one_rank_and_two(tmp_path: Path) -> None:
    """The comparison's path on CPU: the CPU policy on 1 rank, then 2 under torchrun (gloo), the same batch."""
    policy_dir = save_model_dir(build_tiny_model(0), build_tokenizer(), tmp_path / "tiny")
    two = "GPU 0: A (UUID: 1)\nGPU 1: A (UUID: 2)\n"
    argv = ["--model", str(policy_dir), "--backend", "torch", "--rows", "4", "--repeats", "2"]
    figures = RANKS.main([*argv, "--out", str(tmp_path / "r.json")], two)
    assert json.loads((tmp_path / "r.json").read_text()) == figures
    assert figures["ranks"] == 2 and figures["step_s_1_ranks"] > 0 and figures["step_s_2_ranks"] > 0
