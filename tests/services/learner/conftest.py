"""A random-init tiny policy (fast; rewards mostly 0, which is enough to test the loop), the example
agent, and the task file."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from voltbus.model import build_tiny_model, build_tokenizer, save_model_dir

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "arith_rl"


@pytest.fixture(scope="session")
def policy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_model_dir(build_tiny_model(0), build_tokenizer(), tmp_path_factory.mktemp("policy") / "tiny")


@pytest.fixture(scope="session")
def example() -> Any:
    """The arith_rl example's agent module."""
    spec = importlib.util.spec_from_file_location("arith_rl_agent", EXAMPLE / "agent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def task_file(tmp_path: Path, example: Any) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in example.tasks()))
    return path
