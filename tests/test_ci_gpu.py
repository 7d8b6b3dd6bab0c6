"""``bash .ci/gpu`` (the GPU run in one command) on a machine without a CUDA GPU: it stops at once with exit 2
and a message saying what it needs, before installing anything; the run's driver parses its arguments."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from voltbus.model import build_tiny_model, build_tokenizer, save_model_dir
from voltbus.services.settings import NatsSettings, Settings
from voltbus.trainer.example import load_module

ROOT = Path(__file__).resolve().parent.parent


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
