"""Concurrent requests share batches (counted at /stats); batch size limits; a client that leaves mid-stream
stops its sequence."""

from __future__ import annotations

import asyncio

import httpx

from ...conftest import wait_for
from .conftest import MODEL

BODY = {"model": MODEL, "prompt": "4+5=", "max_tokens": 8, "return_token_ids": True}


async def test_concurrent_requests_and_samples_share_batches(make_server) -> None:
    url = make_server(batch_quiet_ms=200, batch_max_wait_ms=3000)
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": True}
        calls = [http.post("/v1/completions", json=BODY | {"n": 2}) for _ in range(15)]
        calls.append(http.post("/v1/chat/completions", json=chat))
        answers = await asyncio.gather(*calls)
        assert all(a.status_code == 200 for a in answers)
        assert answers[-1].text.rstrip().endswith("data: [DONE]")
        stats = (await http.get("/stats")).json()
    assert stats["requests"] == 16 and stats["sequences"] == 31
    assert stats["batches"] <= 4 and stats["largest_batch"] >= 8, stats


async def test_batch_row_limit_keeps_a_request_whole(make_server) -> None:
    url = make_server(max_batch_rows=8, batch_quiet_ms=200, batch_max_wait_ms=3000)
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        calls = [http.post("/v1/completions", json=BODY | {"n": 3}) for _ in range(5)]
        calls.append(http.post("/v1/completions", json=BODY | {"n": 12}))
        answers = await asyncio.gather(*calls)
        assert [len(a.json()["choices"]) for a in answers] == [3] * 5 + [12]
        stats = (await http.get("/stats")).json()
    assert stats["sequences"] == 27 and stats["largest_batch"] == 12 and stats["batches"] >= 3, stats


async def test_client_leaving_a_stream_stops_its_sequence(make_server) -> None:
    url = make_server()
    body = BODY | {"max_tokens": 480, "ignore_eos": True, "stream": True}
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        async with http.stream("POST", "/v1/completions", json=body) as response:
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    break  # leave after the first chunk

        async def ended() -> bool:
            stats = (await http.get("/stats")).json()
            return stats["batches"] == 1 and stats["running"] == 0

        await wait_for(ended, 20, "the batch to end", every=0.005)
        stats = (await http.get("/stats")).json()
        assert stats["aborted"] == 1 and stats["tokens"] < 480, stats
        assert (await http.post("/v1/completions", json=BODY)).status_code == 200
