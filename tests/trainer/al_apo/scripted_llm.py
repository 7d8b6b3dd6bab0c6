"""A scripted OpenAI-compatible server standing in for every model of AL's APO example (the outer edge): the room
selector's task model (a tool call, then a choice), its judge (structured output) and APO's critic (critique, then
edit). The task model chooses well only when the prompt carries ``MARKER``, which the critic's edit adds."""

from __future__ import annotations

import json
import re
import socket
import threading
from collections import Counter
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

MARKER = "Pick the free room with the least spare capacity that has every need."
CRITIQUE = "- The template never says how to choose among the rooms that fit."


def oracle(user: str, rooms: list[dict[str, Any]]) -> str:
    """The room AL's oracle prompt describes: free, big enough, equipped, accessible if asked; least slack first."""
    attendees = int(re.search(r"(\d+) attendees", user).group(1))  # type: ignore[union-attr]
    needs = re.findall(r"'(\w+)'", re.search(r"Needs: (\[.*?\])", user).group(1))  # type: ignore[union-attr]
    accessible = "Accessible required: True" in user
    fits = [
        r
        for r in rooms
        if r["free"] and r["capacity"] >= attendees and set(needs) <= set(r["equipment"])
        if r["accessible"] or not accessible
    ]
    key = lambda r: (r["capacity"] - attendees, len(r["equipment"]) - len(needs), r["distance_m"], len(r["booked"]))  # noqa: E731
    return min(fits, key=key)["id"] if fits else "No Room"


def naive(rooms: list[dict[str, Any]]) -> str:
    """The first free room, whatever it holds."""
    return next((r["id"] for r in rooms if r["free"]), "No Room")


def completion(message: dict[str, Any], model: str) -> Response:
    choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": model, "choices": [choice]}
    return JSONResponse(body | {"usage": usage})


class ScriptedLLM:
    """The server, on a socket bound before its thread starts; ``calls`` counts requests by role."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.models: Counter[str] = Counter()
        self.edits = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        app = Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"])])
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    async def chat(self, request: Request) -> Response:
        body = await request.json()
        messages, model = body["messages"], body["model"]
        self.models[model] += 1
        if "response_format" in body:  # the judge: client.chat.completions.parse(response_format=JudgeResponse)
            self.calls["judge"] += 1
            prompt = messages[-1]["content"]
            output = prompt.split("Task output:\n")[1].split("\n\nTask expected answer:\n")[0]
            expected = prompt.split("Task expected answer:\n")[1].split("\n")[0]
            score = 1.0 if f"final_choice: {expected}" in output else 0.0
            return completion({"content": json.dumps({"reason": "exact match check", "score": score})}, model)
        if body.get("tools"):  # the task model's first turn: look the rooms up
            self.calls["task_tool_call"] += 1
            user = messages[-1]["content"]
            date, time, duration = re.search(r"on (\S+) at (\S+) for (\d+) minutes", user).groups()  # type: ignore[union-attr]
            args = {"date": date, "time": time, "duration_min": int(duration)}
            call = {"id": "call_1", "type": "function", "function": {"name": "get_rooms_and_availability",
                                                                      "arguments": json.dumps(args)}}  # fmt: skip
            return completion({"content": None, "tool_calls": [call]}, model)
        if any(m["role"] == "tool" for m in messages):  # the task model's answer
            self.calls["task_answer"] += 1
            user = next(m["content"] for m in messages if m["role"] == "user")
            rooms = json.loads(next(m["content"] for m in messages if m["role"] == "tool"))["rooms"]
            room = oracle(user, rooms) if MARKER in user else naive(rooms)
            return completion({"content": f"final_choice: {room}\nreason: scripted"}, model)
        prompt = messages[-1]["content"]
        if CRITIQUE in prompt:  # APO's edit: the template with the marker
            self.calls["edit"] += 1
            self.edits += 1
            seed = "Find a room on {date} at {time} for {duration_min} minutes, {attendees} attendees. "
            seed += "Needs: {needs}. Accessible required: {accessible_required}"
            return completion({"content": f"```\n{seed}. {MARKER} (v{self.edits})\n```"}, model)
        self.calls["critique"] += 1
        return completion({"content": CRITIQUE}, model)

    def __enter__(self) -> ScriptedLLM:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()
