"""Hot swap through ``/update_weights``: the version label follows the weights, a swap waits for the batch in
progress (no response is labelled with a version that did not sample it), bad weights are refused; pause."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import torch
from safetensors.torch import save_file

from voltbus.model import sequence_logprobs, weights_sha256

from ...conftest import wait_for
from .conftest import MODEL, stats

BODY = {"model": MODEL, "prompt": "2+2=", "max_tokens": 12, "temperature": 0, "logprobs": 0, "return_token_ids": True}


def agrees(model: Any, choice: dict[str, Any]) -> bool:
    expected = sequence_logprobs(model, choice["prompt_token_ids"], choice["token_ids"])
    return max(abs(a - b) for a, b in zip(choice["logprobs"]["token_logprobs"], expected, strict=True)) <= 1e-5


def test_update_weights_changes_version_and_outputs(make_server, model_dirs: dict, reference: dict) -> None:
    url = make_server()
    before = httpx.post(f"{url}/v1/completions", json=BODY)
    path = model_dirs[1] / "model.safetensors"
    swapped = httpx.post(f"{url}/update_weights", json={"path": str(path), "version": "run-1:step-1"})
    assert swapped.status_code == 200, swapped.text
    assert swapped.json()["weight_version"] == "run-1:step-1" and swapped.json()["sha256"] == weights_sha256(path)
    after = httpx.post(f"{url}/v1/completions", json=BODY)
    assert after.headers["x-voltbus-weight-version"] == after.json()["weight_version"] == "run-1:step-1"
    assert before.json()["weight_version"] == f"local:{weights_sha256(model_dirs[0])[:12]}"
    assert after.json()["choices"][0]["token_ids"] != before.json()["choices"][0]["token_ids"]
    assert agrees(reference[1], after.json()["choices"][0]) and not agrees(reference[0], after.json()["choices"][0])
    unlabelled = httpx.post(f"{url}/update_weights", json={"path": str(model_dirs[0])}).json()  # a model directory
    assert unlabelled["weight_version"] == f"local:{weights_sha256(model_dirs[0])[:12]}"
    assert agrees(reference[0], httpx.post(f"{url}/v1/completions", json=BODY).json()["choices"][0])


def test_bad_weights_are_refused_and_the_old_ones_stay(make_server, model_dirs: dict, tmp_path: Path) -> None:
    url = make_server()
    version = httpx.get(f"{url}/healthz").json()["weight_version"]
    wrong_digest = {"path": str(model_dirs[1]), "version": "x", "sha256": "0" * 64}
    save_file({"not.a.weight": torch.zeros(2)}, tmp_path / "other.safetensors")
    for body in (
        wrong_digest,
        {"path": str(tmp_path / "missing.safetensors")},
        {"path": str(tmp_path / "other.safetensors")},
        {},
    ):
        answer = httpx.post(f"{url}/update_weights", json=body)
        assert answer.status_code == 400 and answer.json()["error"]["message"], body
    assert httpx.get(f"{url}/healthz").json()["weight_version"] == version
    assert "sha256" in stats(url)["last_swap_error"] or "fit" in stats(url)["last_swap_error"]


async def test_swap_during_generation_never_mislabels(make_server, model_dirs: dict, reference: dict) -> None:
    """Requests in flight while a swap arrives: each response's tokens and logprobs come from the version it names."""
    url = make_server(batch_quiet_ms=5, batch_max_wait_ms=20)
    body = BODY | {"max_tokens": 32, "temperature": 1.0}
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        old = (await http.get("/healthz")).json()["weight_version"]

        async def running() -> bool:
            return (await http.get("/stats")).json()["running"] > 0

        first = [asyncio.create_task(http.post("/v1/completions", json=body | {"n": 2})) for _ in range(8)]
        await wait_for(running, 20, "a batch in progress", every=0.005)
        swap = asyncio.create_task(http.post("/update_weights", json={"path": str(model_dirs[1]), "version": "new"}))
        second = [asyncio.create_task(http.post("/v1/completions", json=body | {"n": 2})) for _ in range(8)]
        answers = [a.json() for a in await asyncio.gather(*first, *second)]
        assert (await swap).status_code == 200
    labels = [a["weight_version"] for a in answers]
    assert set(labels) == {old, "new"}, labels
    for answer in answers:
        model = reference[0] if answer["weight_version"] == old else reference[1]
        assert all(agrees(model, choice) for choice in answer["choices"])


async def test_pause_holds_new_batches_until_resume(make_server) -> None:
    url = make_server()
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        assert (await http.post("/pause")).json() == {"is_paused": True}
        assert (await http.get("/is_paused")).json() == {"is_paused": True}
        call = asyncio.create_task(http.post("/v1/completions", json=BODY))

        async def queued() -> bool:
            return (await http.get("/stats")).json()["waiting_requests"] == 1

        await wait_for(queued, 20, "the request to wait", every=0.005)
        assert not call.done()
        await http.post("/resume")
        assert (await call).status_code == 200
        assert (await http.get("/is_paused")).json() == {"is_paused": False}
