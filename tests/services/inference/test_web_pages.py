"""No web page may swap, pause or query the inference server (issue 24, review of finding 4 on the other services):
a form's text/plain post, another page's Origin and another Host (DNS rebinding) are refused, and the policy
served stays the one it was."""

from __future__ import annotations

import httpx


def test_a_web_page_cannot_swap_or_pause_the_policy(server: str) -> None:
    before = httpx.get(f"{server}/v1/models").json()
    form = httpx.post(f"{server}/pause", content=b"{}", headers={"Content-Type": "text/plain"})
    page = httpx.post(f"{server}/update_weights", json={"path": "/tmp/x"}, headers={"Origin": "http://evil.example"})
    rebound = httpx.post(f"{server}/resume", json={}, headers={"Host": "evil.example:8000"})
    assert (form.status_code, page.status_code, rebound.status_code) == (415, 403, 400)
    chat = {"model": before["data"][0]["id"], "messages": [{"role": "user", "content": "1+1="}], "max_tokens": 2}
    assert httpx.post(f"{server}/v1/chat/completions", json=chat, timeout=60).status_code == 200  # not paused
    assert httpx.get(f"{server}/v1/models").json() == before
