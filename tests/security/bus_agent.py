"""An isolated agent that reports, as its reward, whether its process can see any voltbus setting."""

from __future__ import annotations

import os
from typing import Any

import voltbus as agl


@agl.rollout
def credential_free_agent(task: dict[str, Any], prompt_template: agl.PromptTemplate) -> None:
    """Calls the model through the gateway (AGL_* only); reward 1 when no ``VOLTBUS_*`` variable reached it."""
    import httpx
    import openai

    key = os.environ["AGL_KEY"] or "none"
    client = openai.OpenAI(base_url=os.environ["AGL_OPENAI_BASE_URL"], api_key=key)
    client.chat.completions.create(model="any", messages=[{"role": "user", "content": task["question"]}])
    leaked = [name for name in os.environ if name.startswith("VOLTBUS_")]
    event = {"event_type": "reward", "data": {"value": 0.0 if leaked else 1.0}}
    httpx.post(os.environ["AGL_EVENT_URL"], json=event, headers={"Authorization": f"Bearer {key}"}).raise_for_status()
