"""An Agent Lightning 1.0 agent class for ``run_ppo``: its task in ``A`` and ``B`` (``env_map``), its endpoint in
``AGL_*``; it asks the policy for ``A+B=`` and posts reward 1 for the exact sum. It imports nothing of voltbus."""

from __future__ import annotations

import os

import httpx
import openai


class ArithAgent:
    def run(self) -> None:
        a, b, key = int(os.environ["A"]), int(os.environ["B"]), os.environ["AGL_KEY"]
        client = openai.OpenAI(base_url=os.environ["AGL_OPENAI_BASE_URL"], api_key=key, max_retries=5)
        reply = client.completions.create(model="auto", prompt=f"{a}+{b}=", max_tokens=4, temperature=1.0)
        reward = 1.0 if reply.choices[0].text.strip() == str(a + b) else 0.0
        event = {"event_type": "reward", "data": {"value": reward}}
        headers = {"Authorization": f"Bearer {key}"}
        httpx.post(os.environ["AGL_EVENT_URL"], json=event, headers=headers, timeout=30).raise_for_status()
