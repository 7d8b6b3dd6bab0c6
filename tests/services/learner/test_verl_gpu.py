"""``VerlActor`` on a CUDA GPU (marker ``gpu``): the tiny model, then, when ``VOLTBUS_TEST_HF_MODEL``
names a local Hugging Face model directory (e.g. Qwen2.5-0.5B-Instruct), that model."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import torch

from voltbus.services.settings import NatsSettings

HAS_VERL = importlib.util.find_spec("verl") is not None
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(not HAS_VERL, reason="needs verl 0.9.1: pip install 'voltbus[gpu]'"),
]
if HAS_VERL:
    from .verl_checks import check_kl, check_loop, check_resume, check_update

HF_MODEL = os.environ.get("VOLTBUS_TEST_HF_MODEL")


def test_one_update_raises_the_positive_response(policy_dir: Path, tmp_path: Path) -> None:
    check_update(policy_dir, tmp_path)


def test_a_saved_version_resumes_with_its_optimizer(policy_dir: Path, tmp_path: Path) -> None:
    check_resume(policy_dir, tmp_path)


def test_the_kl_term_uses_the_starting_policy(policy_dir: Path, tmp_path: Path) -> None:
    check_kl(policy_dir, tmp_path)


@pytest.mark.timeout(300)
def test_the_loop_trains_with_backend_verl(nats_settings: NatsSettings, policy_dir: Path, tmp_path: Path) -> None:
    check_loop(nats_settings, policy_dir, tmp_path)


@pytest.mark.skipif(HF_MODEL is None, reason="set VOLTBUS_TEST_HF_MODEL to a local HF model directory")
@pytest.mark.timeout(600)
def test_an_instruct_model_update_raises_the_positive_response(tmp_path: Path) -> None:
    check_update(Path(str(HF_MODEL)), tmp_path, lr=1e-5)
