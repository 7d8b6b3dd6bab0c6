"""``voltbus inference --model DIR`` serves the directory (a real process, stopped with SIGTERM)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx

from ...conftest import free_port, wait_until


def test_voltbus_inference_command_serves_a_model_dir(model_dirs: dict[int, Path]) -> None:
    port = free_port()
    code = "import sys; from voltbus.cli import main; sys.argv = ['voltbus', *sys.argv[1:]]; main()"
    args = ["inference", "--model", str(model_dirs[0]), "--port", str(port)]
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stderr=subprocess.PIPE, text=True)
    try:

        def answers() -> dict | None:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).json()
            except httpx.TransportError:
                return None

        health = wait_until(answers, timeout=60, what="the inference server's /healthz", every=0.05)
        assert health["model"] == "seed0" and health["weight_version"].startswith("local:")
        answer = httpx.post(
            f"http://127.0.0.1:{port}/v1/completions", json={"model": "seed0", "prompt": "1+1=", "max_tokens": 2}
        )
        assert answer.status_code == 200 and len(answer.json()["choices"]) == 1
    finally:
        proc.terminate()
        proc.wait(timeout=30)
