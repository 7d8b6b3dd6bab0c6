"""The tiny model library: tokenizer, deterministic build, model directories, logprob recomputation,
the ``voltbus model init`` command, and the import boundary (``import voltbus`` never loads torch)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from voltbus.cli import app
from voltbus.model import (
    build_tiny_model,
    build_tokenizer,
    greedy_accuracy,
    load_model_dir,
    save_model_dir,
    sequence_logprobs,
    warm_start,
    weights_sha256,
)


def test_tokenizer_round_trips_text_and_renders_chat() -> None:
    tok = build_tokenizer()
    text = "Q: 12+7=?\nA: 19, ok! ~{x}"
    ids = tok(text).input_ids
    assert ids[0] == tok.bos_token_id and len(ids) == len(text) + 1
    assert tok.decode(ids, skip_special_tokens=True) == text
    chat = tok.apply_chat_template([{"role": "user", "content": "2+3="}], tokenize=False, add_generation_prompt=True)
    assert chat == "<s>user: 2+3=\nassistant: "
    assert tok("é").input_ids == [tok.bos_token_id, tok.unk_token_id]
    assert (tok.pad_token_id, tok.eos_token_id) == (0, 2)


def test_build_is_deterministic_per_seed_and_about_a_million_parameters() -> None:
    a, b, c = build_tiny_model(3), build_tiny_model(3), build_tiny_model(4)
    assert 0.9e6 < sum(p.numel() for p in a.parameters()) < 1.2e6
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))
    assert not torch.equal(a.model.embed_tokens.weight, c.model.embed_tokens.weight)
    assert a.lm_head.weight is a.model.embed_tokens.weight  # tied


def test_model_dir_round_trip(tmp_path: Path) -> None:
    model, tok = build_tiny_model(1), build_tokenizer()
    folder = save_model_dir(model, tok, tmp_path / "m")
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in folder.iterdir()}
    loaded, tok2 = load_model_dir(folder)
    ids = torch.tensor([tok("7+1=").input_ids])
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, loaded(input_ids=ids).logits)
    assert tok2("7+1=").input_ids == tok("7+1=").input_ids and tok2.chat_template == tok.chat_template
    assert len(weights_sha256(folder)) == 64
    with pytest.raises(FileNotFoundError, match="voltbus model init"):
        load_model_dir(tmp_path / "nothing")


def test_sequence_logprobs_are_raw_log_softmax() -> None:
    model, tok = build_tiny_model(2), build_tokenizer()
    prompt, response = tok("3+3=").input_ids, [22, 23, 2]
    got = sequence_logprobs(model, prompt, response)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + response])).logits[0]
    expected = [torch.log_softmax(logits[len(prompt) - 1 + i], -1)[t].item() for i, t in enumerate(response)]
    assert got == pytest.approx(expected, abs=1e-6)
    assert sequence_logprobs(model, prompt, []) == []
    with pytest.raises(ValueError):
        sequence_logprobs(model, [], [1])


def test_model_init_command_writes_a_loadable_directory(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["model", "init", "--out", str(tmp_path / "m"), "--steps", "0", "--seed", "5"])
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output
    model, _ = load_model_dir(tmp_path / "m")
    assert torch.equal(model.model.embed_tokens.weight, build_tiny_model(5).model.embed_tokens.weight)


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_import_voltbus_does_not_load_torch() -> None:
    done = run_python("import sys, voltbus, voltbus.cli; print('torch' in sys.modules, 'transformers' in sys.modules)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]


def test_without_torch_the_model_package_says_what_to_install() -> None:
    blocker = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch' or name.startswith('torch.'):\n"
        "            raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n"
        "sys.meta_path.insert(0, Block())\n"
        "try:\n"
        "    import voltbus.model\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = run_python(blocker)
    assert "install voltbus[learn]" in done.stdout, done.stdout + done.stderr


@pytest.mark.slow
@pytest.mark.timeout(900)  # ~30 s quiet; several times that when other jobs share the 2 cores
def test_warm_start_learns_the_format_and_mostly_the_answer() -> None:
    """About 30 s on 2 cores: greedy accuracy on a+b= goes from 0 to at least 0.3 (research: about 0.45-0.6)."""
    model, tok = build_tiny_model(0), build_tokenizer()
    assert greedy_accuracy(model, tok) == 0.0
    lines: list[str] = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as `voltbus model init` does: 2 threads on 2 busy cores ran 2-3x slower
    try:
        loss = warm_start(model, tok, progress=lines.append)
    finally:
        torch.set_num_threads(threads)
    assert loss < 0.8 and len(lines) == 10
    assert greedy_accuracy(model, tok) >= 0.3
