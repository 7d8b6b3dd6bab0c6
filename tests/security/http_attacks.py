"""Figures for issue 24's finding 10, measured on a real gateway process: its memory under header floods
and how long slow-header (slowloris) connections stay open. Not a test: its numbers go in docs/security.md.

Run: ``python -m tests.security.http_attacks`` (``--help`` for the sizes). The gateway runs as deployed
(``python -m voltbus.services.gateway``, default settings but the bus and port) against an embedded
nats-server; no engine is needed (the attacks never get past the headers).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from voltbus.services.ops.natsserver import NatsServer
from voltbus.services.serving import free_port
from voltbus.services.settings import BusSettings

ROOT = Path(__file__).resolve().parents[2]


def memory(pid: int) -> dict[str, float]:
    """The process's resident memory now and at its peak, in MiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {name: int(fields[name].split()[0]) / 1024 for name in ("VmRSS", "VmHWM")}


async def big_header(port: int, size: int) -> str:
    """One request whose single header line is ``size`` bytes; the status line answered, or what broke."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: ")
    chunk = b"a" * (1 << 20)

    async def send() -> None:
        for _ in range(size >> 20):
            writer.write(chunk)
            await writer.drain()
        writer.write(b"\r\n\r\n")
        await writer.drain()

    sending = asyncio.create_task(send())
    try:
        line = await asyncio.wait_for(reader.readline(), 120)
        return line.decode().strip() or "closed"
    except (ConnectionError, TimeoutError) as exc:
        return type(exc).__name__
    finally:
        sending.cancel()
        await asyncio.gather(sending, return_exceptions=True)
        writer.close()


async def slowloris(port: int, count: int, hold: float, step: float) -> list[tuple[float, int]]:
    """``count`` connections drip a header byte each per second; how many are still open, every ``step`` s."""
    conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(count)]
    for _, writer in conns:
        writer.write(b"GET /healthz HTTP/1.1\r\nx-slow: ")

    async def drip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while not reader.at_eof():
            try:
                await asyncio.wait_for(reader.read(1 << 16), 1.0)  # the attacker's pace: a byte a second
            except TimeoutError:
                writer.write(b"a")
            except ConnectionError:
                return

    tasks = [asyncio.create_task(drip(r, w)) for r, w in conns]
    start, seen = time.monotonic(), []
    while (elapsed := time.monotonic() - start) < hold:
        await asyncio.sleep(step)
        seen.append((round(elapsed + step), sum(not t.done() for t in tasks)))
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for _, writer in conns:
        writer.close()
    return seen


async def attack(port: int, pid: int, args: argparse.Namespace) -> None:
    """Run the attacks on the gateway at ``port`` (process ``pid``), printing what they did."""
    async with httpx.AsyncClient() as http:
        for _ in range(300):
            try:
                (await http.get(f"http://127.0.0.1:{port}/healthz")).raise_for_status()
                break
            except httpx.TransportError:
                await asyncio.sleep(0.1)
    print(f"gateway pid {pid}, idle: {memory(pid)}")
    print(f"one 1 MiB header: {await big_header(port, 1 << 20)}")
    answers = await asyncio.gather(*(big_header(port, args.mib << 20) for _ in range(args.floods)))
    print(f"{args.floods} x {args.mib} MiB header lines: {sorted(set(answers))}")
    await asyncio.sleep(1.0)  # let the gateway drop what it buffered before reading its memory
    print(f"after the header flood: {memory(pid)} (VmHWM: the peak)")
    seen = await slowloris(port, args.slow, args.hold, args.step)
    print(f"{args.slow} slowloris connections still open at (s, open): {seen}")
    print(f"after the slowloris: {memory(pid)}")


def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(BusSettings(data_dir=Path(tmp) / "nats", port=0, monitor_port=0), 4 << 20).start()
        port = free_port()
        env = {**os.environ, "PYTHONPATH": str(ROOT), "VOLTBUS_NATS__URL": server.url}
        env |= {"VOLTBUS_GATEWAY__PORT": str(port), "VOLTBUS_GATEWAY__UPSTREAM_URL": "http://127.0.0.1:9/v1"}
        gw = subprocess.Popen([sys.executable, "-m", "voltbus.services.gateway"], cwd=ROOT, env=env)
        try:
            asyncio.run(attack(port, gw.pid, args))
        finally:
            gw.terminate()
            gw.wait(30)
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--floods", type=int, default=8, help="concurrent huge-header requests")
    parser.add_argument("--mib", type=int, default=64, help="MiB of each huge header line")
    parser.add_argument("--slow", type=int, default=2000, help="slowloris connections")
    parser.add_argument("--hold", type=float, default=20.0, help="seconds to watch them")
    parser.add_argument("--step", type=float, default=5.0, help="seconds between counts")
    main(parser.parse_args())
