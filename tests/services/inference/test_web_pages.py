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


def test_weight_swaps_and_pauses_need_the_admin_key_when_one_is_set(make_server) -> None:
    url = make_server(admin_key="inference-admin")
    for path in ("/pause", "/resume", "/update_weights"):
        assert httpx.post(f"{url}{path}", json={}).status_code == 401, path
        assert httpx.post(f"{url}{path}", json={}, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(f"{url}/is_paused").json() == {"is_paused": False}
    admin = {"Authorization": "Bearer inference-admin"}
    assert httpx.post(f"{url}/pause", headers=admin).json() == {"is_paused": True}
    assert httpx.post(f"{url}/resume", headers=admin).json() == {"is_paused": False}
    assert httpx.get(f"{url}/v1/models").status_code == 200  # serving needs no key
