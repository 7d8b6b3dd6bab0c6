"""Real inference servers (uvicorn, each on its own thread and event loop) around tiny local models.

A server runs on its own thread so that the official sync ``openai`` client can call it from a test
without blocking the server's event loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from voltbus.model import build_tiny_model, build_tokenizer, load_model_dir, save_model_dir
from voltbus.services.inference import build_app
from voltbus.services.settings import InferenceSettings, NatsSettings, Settings

from ...conftest import free_port, wait_until

MODEL = "tiny"
"""Served model name in these tests."""


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """Random-init tiny models for seeds 0 and 1 (no warm start: fast)."""
    root = tmp_path_factory.mktemp("models")
    return {seed: save_model_dir(build_tiny_model(seed), build_tokenizer(), root / f"seed{seed}") for seed in (0, 1)}


@pytest.fixture(scope="session")
def reference(model_dirs: dict[int, Path]) -> dict[int, Any]:
    """The same models loaded in the test process, for recomputing logprobs."""
    return {seed: load_model_dir(path)[0] for seed, path in model_dirs.items()}


@contextmanager
def serving(settings: Settings, timeout: float = 30.0) -> Iterator[str]:
    """Run the app with uvicorn on a thread; yields its base URL (without ``/v1``)."""
    port = free_port()
    config = uvicorn.Config(build_app(settings), host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"inference-{port}", daemon=True)
    thread.start()

    def started() -> bool:  # uvicorn offers no start-up event
        if not thread.is_alive():
            raise RuntimeError("inference server did not start")
        return server.started

    try:
        wait_until(started, timeout, "the inference server to start")
    except BaseException:
        server.should_exit = True
        raise
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout)


Factory = Callable[..., str]


@pytest.fixture
def make_server(model_dirs: dict[int, Path]) -> Iterator[Factory]:
    """Start servers with inference settings overridden by keywords (``nats=`` for the bus)."""
    with ExitStack() as stack:

        def make(nats: NatsSettings | None = None, **inference: Any) -> str:
            cfg = InferenceSettings(model_dir=model_dirs[0], served_model_name=MODEL, seed=0, **inference)
            settings = Settings(inference=cfg) if nats is None else Settings(nats=nats, inference=cfg)
            return stack.enter_context(serving(settings))

        yield make


@pytest.fixture(scope="session")
def server(model_dirs: dict[int, Path]) -> Iterator[str]:
    """One shared server (seed-0 model) for the tests that do not change its weights."""
    cfg = InferenceSettings(model_dir=model_dirs[0], served_model_name=MODEL, seed=0)
    with serving(Settings(inference=cfg)) as url:
        yield url


def stats(url: str) -> dict[str, Any]:
    return httpx.get(f"{url}/stats").json()
