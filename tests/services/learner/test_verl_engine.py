"""verl's real training engine behind ``VerlActor``, on CPU where there is no GPU (``verl_cpu``).

Marker ``verl``: run with ``pytest -m verl`` in an environment that has verl 0.9.1 (see
docs/learning.md "The GPU path" for the scratch venv that runs it on CPU); skipped without verl."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from voltbus.services.settings import NatsSettings

HAS_VERL = importlib.util.find_spec("verl") is not None
pytestmark = [  # a skip mark, not importorskip: deselected by marker, these show as nothing in the default run
    pytest.mark.verl,
    pytest.mark.skipif(not HAS_VERL, reason="needs verl 0.9.1 (pip install 'voltbus[gpu]', or bash .ci/verl)"),
]
if HAS_VERL:
    from .verl_checks import check_kl, check_loop, check_resume, check_update
    from .verl_cpu import use_cpu_if_no_gpu

    DEVICE = use_cpu_if_no_gpu()


def test_one_update_raises_the_positive_response(policy_dir: Path, tmp_path: Path) -> None:
    check_update(policy_dir, tmp_path)


def test_a_saved_version_resumes_with_its_optimizer(policy_dir: Path, tmp_path: Path) -> None:
    check_resume(policy_dir, tmp_path)


def test_the_kl_term_uses_the_starting_policy(policy_dir: Path, tmp_path: Path) -> None:
    check_kl(policy_dir, tmp_path)


@pytest.mark.timeout(300)
def test_the_loop_trains_with_backend_verl(nats_settings: NatsSettings, policy_dir: Path, tmp_path: Path) -> None:
    check_loop(nats_settings, policy_dir, tmp_path)
