"""LoRA versions on vLLM servers, through vLLM's runtime LoRA API (vLLM started with ``--enable-lora`` and
``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``): the base stays loaded, each adapter version is loaded under its
own model name, and the policy's ``ProxyLLM`` names it, so the next batch's calls ask for that adapter.

Per server, with the gateway paused and drained (``push.py``): ``GET /v1/models`` (the adapters it has),
``POST /v1/load_lora_adapter {"lora_name", "lora_path"}`` unless it has that one already (a resumed learner,
a second push of the same version), then ``POST /v1/unload_lora_adapter {"lora_name"}`` for every other
adapter of this policy (``<served_model_name>-lora-*``). The base version (version 1) loads nothing and
unloads them all. vLLM itself is not paused: loading an adapter leaves the calls on the others alone.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from voltbus.services.settings import LearnerSettings

from .http import VllmPushError, request

ADAPTER_FILE = "adapter_model.safetensors"
"""A LoRA version's weights file (``grpo.lora.ADAPTER``; kept here so the push imports no torch)."""


def is_adapter(weights: str | Path) -> bool:
    """Whether a version's weights file is a LoRA adapter."""
    return Path(weights).name == ADAPTER_FILE


def prefix(settings: LearnerSettings) -> str:
    """The model names of this policy's adapters start with this."""
    return f"{settings.served_model_name}-lora-"


def served_name(settings: LearnerSettings, weights: str | Path, sha256: str) -> str:
    """The model name calls of a version ask for: its adapter's on vLLM servers, else ``served_model_name``.

    >>> s = LearnerSettings(lora_rank=8, vllm_urls=["http://v"])
    >>> served_name(s, "/w/r/step-0/adapter_model.safetensors", "ab" * 32), served_name(s, "/m/model.safetensors", "0")
    ('policy-lora-abababababab', 'policy')
    """
    if settings.vllm_urls and is_adapter(weights):
        return f"{prefix(settings)}{sha256[:12]}"
    return settings.served_model_name


async def load_adapter(
    http: httpx.AsyncClient, base: str, settings: LearnerSettings, name: str | None, path: str, timeout: float
) -> None:
    """Serve adapter ``name`` from the directory ``path`` on the server at ``base`` (None: the base alone), and
    unload this policy's other adapters. VllmPushError on a refusal (a 4xx included) or when no answer came."""
    where = f"vLLM server {base}"
    listed = await request(http, "GET", f"{base}/v1/models", f"{where}: GET /v1/models", timeout)
    try:
        loaded = [m["id"] for m in listed.json()["data"]]
    except (ValueError, KeyError, TypeError):
        raise VllmPushError(f"{where}: GET /v1/models: not a model list: {listed.text[:200]}") from None
    if name is not None and name not in loaded:
        what = f"{where}: POST /v1/load_lora_adapter {name} from {path}"
        body = {"lora_name": name, "lora_path": path}
        resp = await request(http, "POST", f"{base}/v1/load_lora_adapter", what, timeout, json=body)
        if resp.status_code == 404:
            hint = "start vLLM with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"
            raise VllmPushError(f"{what}: 404 ({hint})", 404)
    for old in loaded:
        if old != name and old.startswith(prefix(settings)):
            what = f"{where}: POST /v1/unload_lora_adapter {old}"
            await request(http, "POST", f"{base}/v1/unload_lora_adapter", what, timeout, json={"lora_name": old})
