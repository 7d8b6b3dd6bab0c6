"""Bad input gets an OpenAI-shaped error with the right status, and the server keeps serving."""

from __future__ import annotations

import httpx
import openai
import pytest

from .conftest import MODEL

GOOD = {"model": MODEL, "prompt": "1+1=", "max_tokens": 2}


@pytest.mark.parametrize(
    ("path", "body", "status", "param"),
    [
        ("/v1/completions", {**GOOD, "model": "gpt-5"}, 404, "model"),
        ("/v1/completions", {**GOOD, "prompt": "x" * 600}, 400, "prompt"),
        ("/v1/completions", {**GOOD, "max_tokens": 600}, 400, "max_tokens"),
        ("/v1/completions", {**GOOD, "n": 0}, 400, "n"),
        ("/v1/completions", {**GOOD, "temperature": -1}, 400, "temperature"),
        ("/v1/completions", {**GOOD, "logprobs": 50}, 400, "logprobs"),
        ("/v1/completions", {**GOOD, "prompt": [1, 100000]}, 400, "prompt"),
        ("/v1/completions", {**GOOD, "prompt": []}, 400, "prompt"),
        ("/v1/completions", {**GOOD, "stop": 3}, 400, "stop"),
        ("/v1/completions", {**GOOD, "echo": True}, 400, "echo"),
        ("/v1/chat/completions", {"model": MODEL, "messages": []}, 400, "messages"),
        ("/v1/chat/completions", {"model": MODEL, "messages": [{"content": "x"}]}, 400, "messages"),
        (
            "/v1/chat/completions",
            {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2},
            400,
            "top_logprobs",
        ),
        (
            "/v1/chat/completions",
            {"model": MODEL, "messages": [{"role": "user", "content": "x" * 600}]},
            400,
            "messages",
        ),
    ],
)
def test_bad_requests(server: str, path: str, body: dict, status: int, param: str) -> None:
    answer = httpx.post(f"{server}{path}", json=body, timeout=10)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["param"] == param and error["message"] and error["type"]


def test_malformed_json_and_non_object(server: str) -> None:
    for raw in (b"{not json", b"[1, 2]"):
        answer = httpx.post(f"{server}/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
        assert answer.status_code == 400 and answer.json()["error"]["type"] == "invalid_request_error"
    assert httpx.post(f"{server}/v1/completions", json=GOOD).status_code == 200


def test_body_over_the_limit(make_server) -> None:
    url = make_server(max_body_bytes=1000)
    answer = httpx.post(f"{url}/v1/completions", json={**GOOD, "prompt": "y" * 2000})
    assert answer.status_code == 413 and "1000" in answer.json()["error"]["message"]


def test_openai_client_sees_not_found_and_bad_request(server: str) -> None:
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="none", max_retries=0)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="x", max_tokens=1)
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        client.completions.create(model=MODEL, prompt="z" * 700, max_tokens=1)
