"""CPU inference server throughput next to raw in-process generation, measured in the same run (issue 6).

Run: ``python -m tests.benchmarks.bench_inference`` (flags: ``--help``) or ``pytest -m bench tests/benchmarks``.

The model is the tiny Llama of ``voltbus model init`` (1.06 M parameters, random init: speed does not
depend on training); every sequence is the 5-token prompt ``<s>3+4=`` and exactly ``--tokens`` sampled
tokens (``ignore_eos``), temperature 1.

* Raw baselines, in this process, one after another with the server idle: Hugging Face
  ``model.generate`` on a batch of B copies of the prompt (``gen_b<B>``), and the server's own
  KV-cache loop (``Engine.generate``) called directly (``loop_b<B>``), for B in 1, 16, 64.
* The server (``python -m voltbus.services.inference``, its own process, default settings: 10 ms
  quiet / 50 ms max batching window) under ``httpx.AsyncClient`` load: C tasks each sending
  ``/v1/completions`` requests with ``n=1`` back to back (``server_c<C>``), and one task sending
  requests with ``n=16`` (``server_n16``). Latency is per request.

``ratio`` = server tokens/s ÷ ``model.generate`` tokens/s at the same batch size (c1 and n16 against
B=1 and B=16, c16 against B=16, c64 against B=64); ``loop_b<B>`` rows compare the loop with
``generate``. Medians of ``--reps`` runs per side, alternating which goes first.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import torch

from tests.benchmarks.bench_eventlog import CSV_PATH, Figure, Run, fmt, percentile, write_csv
from tests.benchmarks.bench_gateway import spawn, tail, wait_http
from tests.benchmarks.bench_runner import proc_cpu
from tests.services.gateway.stub_llm import free_port
from voltbus.model import build_tiny_model, build_tokenizer, save_model_dir
from voltbus.services.inference.engine import Engine, Row
from voltbus.services.inference.sampling import Sampling

MODEL = "bench"


@dataclass
class Options:
    """What to run; the defaults keep a run around two minutes on two cores."""

    tokens: int = 64
    batches: list[int] = field(default_factory=lambda: [1, 16, 64])
    requests: int = 240
    """Requests per server run at c16/c64 (c1 and n16 send a quarter / a tenth)."""
    reps: int = 3
    threads: int = 1
    """torch threads, in the server (``VOLTBUS_INFERENCE__TORCH_THREADS``) and for the baselines."""
    time_cap: float = 20.0
    csv: Path | None = CSV_PATH


def raw_generate(model, ids: torch.Tensor, tokens: int, runs: int) -> Run:
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        with torch.inference_mode():
            model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                do_sample=True,
                max_new_tokens=tokens,
                min_new_tokens=tokens,
                pad_token_id=0,
            )
        seconds.append(time.perf_counter() - start)
    return Run(runs * ids.shape[0] * tokens, sum(seconds), seconds)


def raw_loop(engine: Engine, prompt: list[int], batch: int, tokens: int, runs: int) -> Run:
    seconds = []
    for _ in range(runs):
        rows = [Row(prompt, Sampling(max_tokens=tokens, ignore_eos=True)) for _ in range(batch)]
        start = time.perf_counter()
        engine.generate(rows)
        seconds.append(time.perf_counter() - start)
        assert all(len(r.token_ids) == tokens for r in rows)
    return Run(runs * batch * tokens, sum(seconds), seconds)


async def load(url: str, tasks: int, requests: int, n: int, tokens: int, cap: float) -> Run:
    """``tasks`` concurrent senders, ``requests`` requests in all (or until ``cap`` seconds)."""
    body = {"model": MODEL, "prompt": "3+4=", "max_tokens": tokens, "ignore_eos": True, "n": n}
    latencies: list[float] = []
    produced = 0
    limits = httpx.Limits(max_connections=tasks, max_keepalive_connections=tasks)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
        deadline = time.perf_counter() + cap

        async def sender(count: int) -> None:
            nonlocal produced
            for _ in range(count):
                t = time.perf_counter()
                answer = await http.post("/v1/completions", json=body)
                latencies.append(time.perf_counter() - t)
                assert answer.status_code == 200, answer.text
                produced += answer.json()["usage"]["completion_tokens"]
                if time.perf_counter() > deadline:
                    return

        start = time.perf_counter()
        await asyncio.gather(*(sender(requests // tasks) for _ in range(tasks)))
        return Run(produced, time.perf_counter() - start, latencies)


async def stats(url: str) -> dict:
    async with httpx.AsyncClient(base_url=url) as http:
        return (await http.get("/stats")).json()


def median_figure(case: str, runs: list[Run], raws: list[Run], note: str, latency: bool = False) -> Figure:
    def pct(q: float) -> float | None:
        return statistics.median(percentile(r.latencies, q) for r in runs) if latency else None

    return Figure(
        case=case,
        events=int(statistics.median(r.events for r in runs)),
        rate=statistics.median(r.rate for r in runs),
        p50_ms=pct(0.5),
        p99_ms=pct(0.99),
        raw_rate=statistics.median(r.rate for r in raws),
        raw_p50_ms=None,
        raw_p99_ms=None,
        note=note,
    )


async def run(options: Options, workdir: Path) -> list[Figure]:
    torch.set_num_threads(options.threads or torch.get_num_threads())
    tok = build_tokenizer()
    model = build_tiny_model(0)
    model_dir = save_model_dir(model, tok, workdir / MODEL)
    torch.manual_seed(0)
    prompt = tok("3+4=").input_ids
    engine = Engine(model, tok, seed=0)
    port = free_port()
    env = {"VOLTBUS_INFERENCE__MODEL_DIR": str(model_dir), "VOLTBUS_INFERENCE__PORT": str(port)}
    env |= {"VOLTBUS_INFERENCE__SERVED_MODEL_NAME": MODEL, "VOLTBUS_LOG_LEVEL": "WARNING"}
    env |= {"VOLTBUS_INFERENCE__TORCH_THREADS": str(options.threads)}
    log = workdir / "server.log"
    proc = spawn(["-m", "voltbus.services.inference"], env, log)
    url = f"http://127.0.0.1:{port}"
    try:
        await wait_http(f"{url}/healthz", proc, log, timeout=60)
        for b in options.batches:  # warm up the server and the baselines at every batch size
            await load(url, b, 2 * b, 1, options.tokens, options.time_cap)
            raw_generate(model, torch.tensor([prompt] * b), options.tokens, 2)
            raw_loop(engine, prompt, b, options.tokens, 2)
        figures: dict[str, tuple[list[Run], list[Run], str, bool]] = {}
        gen: dict[int, list[Run]] = {b: [] for b in options.batches}
        loop: dict[int, list[Run]] = {b: [] for b in options.batches}
        cases = {
            "server_c1": (1, 1, max(4, options.requests // 4), 1),
            "server_n16": (1, 16, max(2, options.requests // 10), 16),
            **{f"server_c{c}": (c, 1, options.requests, c) for c in options.batches if c > 1},
        }
        served: dict[str, list[Run]] = {case: [] for case in cases}
        cpu: dict[str, list[tuple[float, float]]] = {case: [] for case in cases}
        batch_size: dict[str, list[float]] = {case: [] for case in cases}
        for rep in range(options.reps):
            for b in options.batches:
                ids = torch.tensor([prompt] * b)
                runs = max(2, 8 // b)
                gen[b].append(raw_generate(model, ids, options.tokens, runs))
                loop[b].append(raw_loop(engine, prompt, b, options.tokens, runs))
            for case, (tasks, n, requests, _) in cases.items():
                server_cpu, client_cpu = proc_cpu(proc.pid), time.process_time()
                before = await stats(url)
                done = await load(url, tasks, requests, n, options.tokens, options.time_cap)
                after = await stats(url)
                batch_size[case].append(
                    (after["sequences"] - before["sequences"]) / (after["batches"] - before["batches"])
                )
                count = len(done.latencies)
                server_cpu, client_cpu = proc_cpu(proc.pid) - server_cpu, time.process_time() - client_cpu
                cpu[case].append((server_cpu / count, client_cpu / count))
                served[case].append(done)
            print(f"rep {rep + 1}/{options.reps} done", flush=True)
        for b in options.batches:
            figures[f"loop_b{b}"] = (loop[b], gen[b], f"Engine.generate KV loop vs model.generate, batch {b}", False)
        for case, (tasks, n, _, b) in cases.items():
            server_ms = statistics.median(c[0] for c in cpu[case]) * 1000
            client_ms = statistics.median(c[1] for c in cpu[case]) * 1000
            note = (
                f"{tasks} client task(s), n={n}, {options.tokens} tokens each, vs model.generate batch {b}; "
                f"CPU per request: server {server_ms:.1f} ms, client {client_ms:.1f} ms; "
                f"mean batch {statistics.median(batch_size[case]):.1f} sequences"
            )
            figures[case] = (served[case], gen[b], note, True)
        return [median_figure(case, *spec) for case, spec in figures.items()]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.returncode not in (0, -15):
            print(tail(log))


def table(figures: Sequence[Figure]) -> str:
    lines = [
        "| case | tokens | tok/s | p50 / p99 ms per request | baseline tok/s | ratio |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for f in figures:
        latency = "–" if f.p50_ms is None else f"{fmt(f.p50_ms, '.1f')} / {fmt(f.p99_ms, '.1f')}"
        lines.append(
            f"| `{f.case}` | {f.events:,} | {f.rate:,.0f} | {latency} | {f.raw_rate:,.0f} | **{f.ratio:.0%}** |"
        )
    return "\n".join(lines + [""] + [f"- `{f.case}`: {f.note}" for f in figures])


def parse_args(argv: Sequence[str] | None = None) -> Options:
    d = Options()
    p = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench_inference", description=__doc__.split("\n")[0])
    p.add_argument("--tokens", type=int, default=d.tokens, help="tokens per sequence (%(default)s)")
    p.add_argument("--batches", type=int, nargs="+", default=d.batches, help="batch sizes / concurrency (1 16 64)")
    p.add_argument("--requests", type=int, default=d.requests, help="requests per concurrent server run")
    p.add_argument("--reps", type=int, default=d.reps, help="runs per case; medians are reported (%(default)s)")
    p.add_argument("--threads", type=int, default=d.threads, help="torch threads, 0: torch's default (1)")
    p.add_argument("--time-cap", type=float, default=d.time_cap, help="seconds per server run at most")
    p.add_argument("--no-csv", action="store_true", help="do not append to tests/benchmarks/results.csv")
    a = p.parse_args(argv)
    csv = None if a.no_csv else d.csv
    return Options(a.tokens, a.batches, a.requests, a.reps, a.threads, a.time_cap, csv)


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="voltbus-bench-inference-") as tmp:
        figures = asyncio.run(run(options, Path(tmp)))
    print(table(figures))
    if options.csv is not None:
        write_csv(options.csv, figures)


if __name__ == "__main__":
    main()
