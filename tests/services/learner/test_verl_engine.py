"""verl's real training engine behind ``VerlActor``, on CPU where there is no GPU (``verl_cpu``).

Marker ``verl``: run with ``pytest -m verl`` in an environment that has verl 0.9.1 (see
docs/learning.md "The GPU path" for the scratch venv that runs it on CPU); skipped without verl."""

from __future__ import annotations

import importlib.util

import pytest

from .verl_checks import VerlChecks

HAS_VERL = importlib.util.find_spec("verl") is not None
pytestmark = [  # a skip mark, not importorskip: deselected by marker, these show as nothing in the default run
    pytest.mark.verl,
    pytest.mark.skipif(not HAS_VERL, reason="needs verl 0.9.1 (pip install 'voltbus[gpu]', or bash .ci/verl)"),
]
if HAS_VERL:
    from .verl_cpu import use_cpu_if_no_gpu

    DEVICE = use_cpu_if_no_gpu()


class TestVerlEngineOnThisMachine(VerlChecks):
    """verl's engine on CUDA when there is a GPU, else on CPU."""
