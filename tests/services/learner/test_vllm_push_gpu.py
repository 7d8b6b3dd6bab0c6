"""The weight push against a real vLLM server on a CUDA GPU (marker ``gpu``).

Needs the ``vllm`` command (``VOLTBUS_TEST_VLLM`` names it when it lives in its own environment) and
a GPU. Two tiny models with different random weights: after each push the gateway's recorded call
carries the pushed version, and its logprobs are those of the pushed weights as torch computes them. The same
with two LoRA adapter versions on the seed-0 base, pushed through vLLM's runtime LoRA API (``vllm/lora.py``).
Written from vLLM's documented routes; it has not run yet (no GPU with vLLM where it was written).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import torch

from tests.conftest import wait_until
from tests.services.gateway.conftest import model_calls
from tests.services.gateway.stub_llm import serve
from voltbus.model import load_model_dir, sequence_logprobs
from voltbus.services.clients.model.tiny import build_tiny_model, save_model_dir
from voltbus.services.clients.model.tokenizer import build_tokenizer
from voltbus.services.eventlog import EventLog
from voltbus.services.gateway import build_app
from voltbus.services.learner.grpo.policy import Policy
from voltbus.services.learner.vllm.lora import served_name
from voltbus.services.learner.vllm.push import push
from voltbus.services.serving import free_port
from voltbus.services.settings import GatewaySettings, LearnerSettings, NatsSettings, Settings

VLLM = os.environ.get("VOLTBUS_TEST_VLLM") or shutil.which("vllm")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(VLLM is None, reason="needs vLLM's `vllm` command (or VOLTBUS_TEST_VLLM naming it)"),
]

PROMPT = [1, 22, 15, 23, 33]  # "2+3=" in the tiny tokenizer
LORA_RANK = 8


def model_dir(path: Path, seed: int) -> Path:
    return save_model_dir(build_tiny_model(seed=seed), build_tokenizer(), path)


@contextmanager
def vllm_server(tmp_path: Path, lora: bool) -> Iterator[str]:
    """A vLLM OpenAI server in dev mode serving the seed-0 model (``lora``: with its runtime LoRA API)."""
    port = free_port()
    cmd = [str(VLLM), "serve", str(model_dir(tmp_path / "start", 0)), "--served-model-name", "policy"]
    cmd += ["--port", str(port), "--gpu-memory-utilization", "0.2", "--enforce-eager", "--max-model-len", "256"]
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}
    if lora:
        cmd += ["--enable-lora", "--max-lora-rank", str(LORA_RANK), "--max-loras", "2"]
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    log = (tmp_path / "vllm.log").open("wb")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:  # a subprocess starting: polled, no event to wait on
        assert proc.poll() is None, (tmp_path / "vllm.log").read_text()[-3000:]
        try:
            return httpx.get(f"{url}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(healthy, 600, "vLLM to start", every=1)
        yield url
    finally:
        proc.terminate()
        proc.wait(60)
        log.close()


@pytest.fixture
def vllm_url(tmp_path: Path) -> Iterator[str]:
    """A vLLM server for full-weight pushes, until the test ends."""
    with vllm_server(tmp_path, lora=False) as url:
        yield url


@pytest.fixture
def vllm_lora_url(tmp_path: Path) -> Iterator[str]:
    """A vLLM server with runtime LoRA loading (``--enable-lora``), until the test ends."""
    with vllm_server(tmp_path, lora=True) as url:
        yield url


@pytest.mark.timeout(900)
async def test_each_push_is_served_and_labelled(
    vllm_url: str, nats_settings: NatsSettings, eventlog: EventLog, tmp_path: Path
) -> None:
    cfg = GatewaySettings(upstream_url=f"{vllm_url}/v1", admin_key="root")
    async with serve(build_app(Settings(nats=nats_settings, gateway=cfg)), "on") as gw:
        learner = LearnerSettings(gateway_url=f"{gw}/v1", vllm_urls=[vllm_url], gateway_admin_key="root")
        body = {"model": "policy", "prompt": PROMPT, "max_tokens": 8, "temperature": 0.0}
        for n, seed in enumerate([1, 2], start=1):
            weights = model_dir(tmp_path / f"step-{n}", seed)
            report = await push(learner, f"run:{n}", weights)
            async with httpx.AsyncClient(base_url=gw, timeout=60) as http:
                assert (await http.post("/v1/completions", json=body)).status_code == 200
            call = (await model_calls(eventlog, n))[-1]
            assert call.resources_id == f"run:{n}", report
            model, _ = load_model_dir(weights)
            expected = sequence_logprobs(model, call.prompt_ids, call.response_ids)
            assert call.logprobs == pytest.approx(expected, abs=2e-2)


@pytest.mark.timeout(900)
async def test_each_lora_push_is_served_under_its_adapter_name(
    vllm_lora_url: str, nats_settings: NatsSettings, eventlog: EventLog, tmp_path: Path
) -> None:
    cfg = GatewaySettings(upstream_url=f"{vllm_lora_url}/v1", admin_key="root")
    async with serve(build_app(Settings(nats=nats_settings, gateway=cfg)), "on") as gw:
        learner = LearnerSettings(
            model_dir=tmp_path / "start", weights_dir=tmp_path / "w", lora_rank=LORA_RANK, gateway_url=f"{gw}/v1",
            vllm_urls=[vllm_lora_url], gateway_admin_key="root",
        )  # fmt: skip
        policy = Policy.load(learner)  # the served base (the fixture wrote it) with an adapter
        names = []
        for n in (1, 2):
            for p in policy.model.parameters():
                if p.requires_grad:
                    p.data.add_(0.05 * n)  # a different adapter each time, far enough from the base to tell
            weights, sha = policy.save("run", n)
            names.append(served_name(learner, weights, sha))
            report = await push(learner, f"run:{n + 1}", weights, adapter=names[-1])
            body = {"model": names[-1], "prompt": PROMPT, "max_tokens": 8, "temperature": 0.0}
            async with httpx.AsyncClient(base_url=gw, timeout=60) as http:
                assert (await http.post("/v1/completions", json=body)).status_code == 200
                served = [m["id"] for m in (await http.get(f"{vllm_lora_url}/v1/models")).json()["data"]]
            assert names[-1] in served and all(old not in served for old in names[:-1]), served
            call = (await model_calls(eventlog, n))[-1]
            assert call.resources_id == f"run:{n + 1}", report
            with torch.no_grad():
                expected = sequence_logprobs(policy.model, call.prompt_ids, call.response_ids)
            assert call.logprobs == pytest.approx(expected, abs=2e-2)
