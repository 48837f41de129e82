"""A SIGTERM or Ctrl-C during `lorastudio generate --out X.png` or `lora convert|merge|resize`
left the hidden staging file next to the output (a SIGTERM ended Python before any `finally`).
Each command runs in a real process of its own whose write is held open by a sleep hook in the
child (safetensors' save_file or PIL's save writes part of the file, says so, then sleeps); the
test signals it there and finds nothing left beside the output. The child is forked from the test
process (tests/forked_cli.py: the CLI's own signal handlers, a real signal, its exit status), not
a fresh interpreter: the signal lands in the write, long after the imports, which are not the
subject (a fresh `generate` child cost ~7 CPU s of diffusers imports, each `lora` one ~2).

`merge` and `resize` read a kohya-layout file, which they write in that layout: the write and its
staging file are write_lora_file's for either layout, and a diffusers-layout output would have the
child import peft and transformers for its adapter config (~5 CPU s, lora/files.diffusers_file);
what merge and resize write in each layout is tests/unit/lora's subject (session 37; kept with
the forked child: a diffusers-layout write would import them in the test process)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import safetensors.torch
import torch
from PIL import Image
from safetensors.torch import save_file

from forked_cli import start_cli
from lorastudio.lora.files import convert_file
from lorastudio.lora.metadata import PREFIX

KEY = "transformer.single_transformer_blocks.0.attn.to_q"


def _slow_writes(marker: Path) -> Callable[[], None]:
    """The child's hook before the real CLI: a slow write (part of the file, a marker, a long
    sleep). Ctrl-C is Python's KeyboardInterrupt in it, as in a terminal's foreground command, even
    when pytest itself runs as a background job (its SIGINT ignored, and so inherited by the child:
    each SIGINT case then waited out its 60 s and failed)."""

    def slow(path: object) -> None:
        Path(str(path)).write_bytes(b"partial")
        marker.write_text("writing", encoding="utf-8")
        time.sleep(120)

    def prepare() -> None:  # in the child only (its own copies of the two modules)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        safetensors.torch.save_file = lambda tensors, path, metadata=None: slow(path)
        Image.Image.save = lambda self, fp, format=None, **kw: slow(fp)

    return prepare


def _lora(path: Path) -> Path:
    g = torch.Generator().manual_seed(0)
    save_file({f"{KEY}.lora_A.weight": torch.randn(2, 32, generator=g),
               f"{KEY}.lora_B.weight": torch.randn(32, 2, generator=g)}, str(path),
              metadata={PREFIX + "family": "flux"})  # fmt: skip
    return path


# Every SIGTERM case (the fix's guards: each failed before) runs by default; Ctrl-C, which ran
# the `finally` before the fix too, by default only through `convert`; the other commands' Ctrl-C
# cases are slow (chosen when each case's fresh interpreter cost ~2-6 CPU s of imports).
_CASES = [
    pytest.param(
        command,
        sig,
        id=f"{command}-{sig.name}",
        marks=pytest.mark.slow if sig == signal.SIGINT and command != "convert" else (),
    )
    for command in ("generate", "convert", "merge", "resize")
    for sig in (signal.SIGTERM, signal.SIGINT)
]


@pytest.mark.parametrize(("command", "sig"), _CASES)
def test_a_signal_mid_write_leaves_no_staging_file(
    tiny_model: Callable[[str], Path], tmp_path: Path, command: str, sig: signal.Signals
) -> None:
    (tmp_path / "in").mkdir()
    lora = _lora(tmp_path / "in" / "a.safetensors")
    if command in ("merge", "resize"):  # (module docstring: why the kohya layout)
        lora = tmp_path / "in" / "a-kohya.safetensors"
        convert_file(tmp_path / "in" / "a.safetensors", lora, "kohya", "flux")
    outs = tmp_path / "outs"
    outs.mkdir()
    args = {
        "generate": ["generate", "--base", str(tiny_model("flux")), "--prompt", "p", "--steps", "1",
                     "--width", "32", "--height", "32", "--out", str(outs / "x.png")],
        "convert": ["lora", "convert", str(lora), str(outs / "x.safetensors"), "--to", "kohya",
                    "--family", "flux"],
        "merge": ["lora", "merge", f"{lora}:0.5", f"{lora}:0.5", "--out", str(outs / "x.safetensors"),
                  "--family", "flux"],
        "resize": ["lora", "resize", str(lora), "--rank", "1", "--out", str(outs / "x.safetensors")],
    }[command]  # fmt: skip
    marker, log = tmp_path / "writing", tmp_path / "child.log"
    child = start_cli(log, *args, prepare=_slow_writes(marker))
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert child.is_alive(), log.read_text()
            assert time.monotonic() < deadline, "the child never began its write"
            time.sleep(0.05)
        assert [p.name.startswith(".") for p in outs.iterdir()] == [True]  # the staging file, mid-write
        assert child.pid is not None
        os.kill(child.pid, sig)
        child.join(60)
    finally:
        if child.is_alive():
            child.kill()
            child.join()
    output = log.read_text()
    assert child.exitcode != 0, output
    if sig == signal.SIGTERM:
        assert child.exitcode == 128 + signal.SIGTERM, (child.exitcode, output)
    assert list(outs.iterdir()) == [], output  # neither the staging file nor a half output
