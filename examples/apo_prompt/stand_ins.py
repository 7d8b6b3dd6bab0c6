"""Two rule-based stand-ins for LLMs, served over the OpenAI chat completions API, so that the example
runs with no model and no network. Neither learns anything; their rules are all in this file.

``stand-in-task`` (the agent's model) reads its prompt for an arithmetic expression and for three
kinds of instruction, and without them makes the mistakes a careless model makes:

- no word about operator precedence ("precedence", "order of operations", "step by step"): it
  evaluates in reading order, so ``5 + 3 * 4`` gives 32;
- no word about decimals: it drops the fraction, so ``7 / 2 - 1`` gives 2;
- no request for the bare answer ("only the final number", "nothing else", ...): it answers in a
  sentence, which the strict grader scores 0.5 at best.

``stand-in-optimizer`` (APO's critic) answers voltbus's two APO prompts
(``services/learner/apo/critique.md``, ``apo/edit.md``). For a critique it reads the runs it is shown
(each task's expected answer, the task model's reply from the recorded call), finds which of the three
mistakes explain each failure, and names one kind, drawn in proportion to how often it appears (seeded
by the prompt's hash: its "temperature"). For an edit it appends the one matching instruction to the
template. It sees only what a real critic sees; it cannot fix a mistake the runs do not show.

>>> task_model("Calculate 5 + 3 * 4.")
'Sure! Working through 5 + 3 * 4, I get 32.'
>>> task_model("Calculate 7 / 2 - 1. " + INSTRUCTIONS["precedence"] + " " + INSTRUCTIONS["wordy"])
'2'
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import socket
import threading
from collections import Counter

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .tasks import EXPRESSION, NUMBER, TOLERANCE, is_whole, last_number, left_to_right, show, with_precedence

TASK_MODEL = "stand-in-task"
OPTIMIZER_MODEL = "stand-in-optimizer"

UNDERSTOOD = {
    "precedence": ("precedence", "order of operations", "step by step"),
    "decimals": ("decimal",),
    "wordy": ("only the final", "only the number", "only the answer", "nothing else", "just the number"),
}
"""The phrases the task model obeys, by the mistake each one prevents."""
INSTRUCTIONS = {
    "wordy": "Reply with only the final number, nothing else.",
    "precedence": "Respect operator precedence: multiply and divide before you add and subtract.",
    "decimals": "If the result is not a whole number, round it to 2 decimal places.",
}
"""What the optimizer's editor appends for each kind of mistake."""
CRITIQUES = {
    "wordy": "- {n} of {total} runs answered in a sentence ({example}); the grader wants the bare number. "
    "Ask for only the final number.",
    "precedence": "- {n} of {total} runs evaluated in reading order ({example}). "
    "Tell the agent to respect operator precedence.",
    "decimals": "- {n} of {total} runs dropped the fraction ({example}). Ask for results rounded to 2 decimal places.",
}
"""The critique for each kind of mistake; the editor recognises it by its last sentence."""


def obeys(prompt: str, kind: str) -> bool:
    """True when ``prompt`` carries an instruction the task model understands against ``kind``."""
    low = prompt.lower()
    return any(phrase in low for phrase in UNDERSTOOD[kind])


def task_model(prompt: str) -> str:
    """The task model's reply to ``prompt``."""
    found = EXPRESSION.search(prompt)
    if found is None:
        return "I could not find a calculation in your message."
    expression = found.group(0)
    value = with_precedence(expression) if obeys(prompt, "precedence") else left_to_right(expression)
    text = show(value) if obeys(prompt, "decimals") else str(int(value))
    return text if obeys(prompt, "wordy") else f"Sure! Working through {expression}, I get {text}."


def mistakes(expression: str, answer: str, reply: str) -> list[str]:
    """The kinds of mistake that explain ``reply`` to ``expression`` (empty when it is right, or unexplained)."""
    kinds = [] if NUMBER.fullmatch(reply.strip()) else ["wordy"]
    got = last_number(reply)
    if got is None or abs(got - float(answer)) <= TOLERANCE:
        return kinds
    right, careless = with_precedence(expression), left_to_right(expression)
    for value, kind in ((right, []), (careless, ["precedence"])):
        if abs(got - value) <= TOLERANCE:
            return kinds + kind
        if not is_whole(value) and got == int(value):
            return kinds + kind + ["decimals"]
    return kinds


def runs(prompt: str) -> list[tuple[str, str, str]]:
    """(expression, expected answer, the task model's reply) of each run shown in a critique prompt."""
    shown = []
    for block in prompt.split("### Example ")[1:]:
        task = re.search(r"^Input: (.*)$", block, flags=re.MULTILINE)
        call = re.search(r"^openai\.chat\.completions\.create (.*)$", block, flags=re.MULTILINE)
        try:
            fields = json.loads(task.group(1)) if task else {}
            response = json.loads(json.loads(call.group(1))["voltbus.llm.response"]) if call else {}
            reply = response["choices"][0]["message"]["content"] or ""
            shown.append((fields["expression"], fields["answer"], reply))
        except (ValueError, KeyError, IndexError, TypeError):
            continue  # a run without a readable call (cut short, or failed)
    return shown


def critique(prompt: str) -> str:
    """One bullet naming one kind of mistake seen in the runs, drawn by how often each appears."""
    shown = runs(prompt)
    seen: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for expression, answer, reply in shown:
        for kind in mistakes(expression, answer, reply):
            seen[kind] += 1
            examples.setdefault(kind, f"`{expression}` got {reply!r}, expected {answer}")
    if not seen:
        return "- Every run shown is right; keep the template as it is."
    rng = random.Random(hashlib.sha256(prompt.encode()).digest())
    kinds = sorted(seen)
    kind = rng.choices(kinds, weights=[seen[k] for k in kinds])[0]
    return CRITIQUES[kind].format(n=seen[kind], total=len(shown), example=examples[kind])


def edit(prompt: str) -> str:
    """The template of an edit prompt with the instruction its critique asks for appended."""
    template = re.search(r"## The prompt template\s*```\n(.*?)\n```", prompt, flags=re.DOTALL)
    asked = re.search(r"## Critique\s*(.*?)\n## Rules", prompt, flags=re.DOTALL)
    if template is None or asked is None:
        return ""
    text = template.group(1)
    for kind, line in CRITIQUES.items():
        if line.rsplit(". ", 1)[-1] in asked.group(1) and not obeys(text, kind):
            text = f"{text} {INSTRUCTIONS[kind]}"
    return text


def optimizer(prompt: str) -> str:
    """The optimizer's reply to one of APO's two prompts."""
    if prompt.startswith("Rewrite the prompt template"):
        return edit(prompt)
    return critique(prompt)


def completion(model: str, content: str) -> dict[str, object]:
    """A chat completion carrying ``content``."""
    message = {"role": "assistant", "content": content}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return {"id": "stand-in", "object": "chat.completion", "created": 0, "model": model, "choices": [choice]}


class StandIns:
    """Both stand-ins on one loopback port (``url`` ends in ``/v1``), in a thread while the block runs;
    ``calls`` counts the calls per model, ``critiques`` keeps the optimizer's critiques."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.critiques: list[str] = []
        models = {TASK_MODEL: task_model, OPTIMIZER_MODEL: optimizer}

        async def chat(request: Request) -> Response:
            body = await request.json()
            reply = models.get(body.get("model"))
            if reply is None:
                error = {"message": f"unknown model {body.get('model')!r}: {sorted(models)}", "type": "not_found"}
                return JSONResponse({"error": error}, status_code=404)
            self.calls[body["model"]] += 1
            prompt = body["messages"][-1]["content"]
            text = reply(prompt)
            if body["model"] == OPTIMIZER_MODEL and not prompt.startswith("Rewrite"):
                self.critiques.append(text)
            return JSONResponse(completion(body["model"], text))

        async def listed(request: Request) -> Response:
            return JSONResponse({"object": "list", "data": [{"id": m, "object": "model"} for m in models]})

        routes = [Route("/v1/chat/completions", chat, methods=["POST"]), Route("/v1/models", listed)]
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        config = uvicorn.Config(Starlette(routes=routes), log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> StandIns:
        self.thread.start()  # the socket listens already: calls queue until the server accepts them
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()
