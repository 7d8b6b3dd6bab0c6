"""An Agent Lightning 1.0-style agent: it imports nothing from voltbus and knows only three variables.

``AGL_OPENAI_BASE_URL``  an OpenAI-compatible base URL scoped to this attempt (voltbus's gateway)
``AGL_EVENT_URL``        where the agent posts its events (here: its reward)
``AGL_KEY``              the bearer key for both (empty when the gateway needs none)

An isolated voltbus runner (``RunnerSettings(isolate=True)``, ``voltbus runner --isolate``) starts
each rollout in its own process with these set; the gateway records every model call with its token
ids, and the reward posted to ``AGL_EVENT_URL`` becomes the attempt's ``RewardReported`` event.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
import openai


def agl_agent(task: dict[str, Any], resources: Any = None) -> None:
    """Ask the policy for ``a+b=`` (sampled: the same agent serves training and evaluation) and post
    reward 1 for the exact sum, else 0. ``resources`` (voltbus's named resources) is not used: the
    parameter is there only so voltbus recognises the function as a rollout."""
    key = os.environ["AGL_KEY"] or "none"
    client = openai.OpenAI(base_url=os.environ["AGL_OPENAI_BASE_URL"], api_key=key, max_retries=5)
    model = client.models.list().data[0].id  # whatever the endpoint serves
    reply = client.completions.create(model=model, prompt=f"{task['a']}+{task['b']}=", max_tokens=4, temperature=1.0)
    reward = 1.0 if reply.choices[0].text.strip() == str(task["a"] + task["b"]) else 0.0
    event = {"event_type": "reward", "data": {"value": reward}}
    headers = {"Authorization": f"Bearer {key}"}
    httpx.post(os.environ["AGL_EVENT_URL"], json=event, headers=headers, timeout=30).raise_for_status()
