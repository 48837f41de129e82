"""A SIGTERM or Ctrl-C during `lorastudio generate --out X.png` or `lora convert|merge|resize`
left the hidden staging file next to the output (a SIGTERM ended Python before any `finally`).
Each command runs as a real subprocess whose write is held open by a sleep hook in the child
(safetensors' save_file or PIL's save writes part of the file, says so, then sleeps); the test
signals it there and finds nothing left beside the output.

`merge` and `resize` read a kohya-layout file, which they write in that layout: the write and its
staging file are write_lora_file's for either layout, and a diffusers-layout output would have the
child import peft and transformers for its adapter config (~5 CPU s, lora/files.diffusers_file);
what merge and resize write in each layout is tests/unit/lora's subject."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import lorastudio
from lorastudio.lora.files import convert_file
from lorastudio.lora.metadata import PREFIX

SRC = str(Path(lorastudio.__file__).resolve().parents[1])
KEY = "transformer.single_transformer_blocks.0.attn.to_q"

# The child: a slow write (part of the file, a marker, a long sleep), then the real CLI. Ctrl-C is
# Python's KeyboardInterrupt in it, as in a terminal's foreground command, even when pytest itself
# runs as a background job (its SIGINT ignored, and so inherited by the child: each SIGINT case
# then waited out its 60 s and failed).
CHILD = """
import signal, sys, time
from pathlib import Path
signal.signal(signal.SIGINT, signal.default_int_handler)
marker = Path(sys.argv[1])

def slow(path):
    Path(path).write_bytes(b"partial")
    marker.write_text("writing")
    time.sleep(120)

import safetensors.torch
safetensors.torch.save_file = lambda tensors, path, metadata=None: slow(path)
from PIL import Image
Image.Image.save = lambda self, fp, format=None, **kw: slow(fp)
from lorastudio.cli.app import main
sys.argv = ["lorastudio", *sys.argv[2:]]
main()
"""


def _lora(path: Path) -> Path:
    g = torch.Generator().manual_seed(0)
    save_file({f"{KEY}.lora_A.weight": torch.randn(2, 32, generator=g),
               f"{KEY}.lora_B.weight": torch.randn(32, 2, generator=g)}, str(path),
              metadata={PREFIX + "family": "flux"})  # fmt: skip
    return path


# Every SIGTERM case (the fix's guards: each failed before) runs by default; Ctrl-C, which ran
# the `finally` before the fix too, by default only through `convert` (~2 CPU s: its child imports
# torch alone); the other commands' Ctrl-C cases (~6 CPU s each: their children import diffusers
# or peft) are slow.
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
    marker = tmp_path / "writing"
    env = {**os.environ, "PYTHONPATH": SRC}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(marker), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert child.poll() is None, child.communicate()[0].decode()
            assert time.monotonic() < deadline, "the child never began its write"
            time.sleep(0.05)
        assert [p.name.startswith(".") for p in outs.iterdir()] == [True]  # the staging file, mid-write
        child.send_signal(sig)
        output = child.communicate(timeout=60)[0].decode()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode != 0, output
    if sig == signal.SIGTERM:
        assert child.returncode == 128 + signal.SIGTERM, (child.returncode, output)
    assert list(outs.iterdir()) == [], output  # neither the staging file nor a half output
