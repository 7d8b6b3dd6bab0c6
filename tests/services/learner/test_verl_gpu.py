"""``VerlActor`` on a CUDA GPU (marker ``gpu``): the tiny model, then, when ``VOLTBUS_TEST_HF_MODEL``
names a local Hugging Face model directory (e.g. Qwen2.5-0.5B-Instruct), that model."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import torch

from .verl_checks import VerlChecks, check_update

HAS_VERL = importlib.util.find_spec("verl") is not None
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(not HAS_VERL, reason="needs verl 0.9.1: pip install 'voltbus[gpu]'"),
]
HF_MODEL = os.environ.get("VOLTBUS_TEST_HF_MODEL")


class TestVerlOnCuda(VerlChecks):
    """The same checks as the ``verl`` tests, on a CUDA GPU."""


@pytest.mark.skipif(HF_MODEL is None, reason="set VOLTBUS_TEST_HF_MODEL to a local HF model directory")
@pytest.mark.timeout(600)
def test_an_instruct_model_update_raises_the_positive_response(tmp_path: Path) -> None:
    check_update(Path(str(HF_MODEL)), tmp_path, lr=1e-5)
