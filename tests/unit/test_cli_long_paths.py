"""Every CLI command that takes a path or a run name answers a name over the file system's limit
(ENAMETOOLONG: a component over 255 bytes) with its own "not found" refusal, exit 2 and no
traceback: before, `train --resume`, `lora list`, `lora push`, `generate --lora` / `--base`,
`lora convert` and `lora merge` stat'ed the name with pathlib and died with an OSError."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.cli_runner import run_cli as _run

from lorastudio.settings import get_settings


def test_a_name_over_the_file_systems_limit_is_not_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = (
        get_settings().ensure_dirs().outputs_dir
    )  # the long name's parent exists: ENAMETOOLONG, not ENOENT
    monkeypatch.chdir(tmp_path)
    long = "x" * 300
    commands = {
        "train --resume": (["train", "--resume", long], "no run folder or checkpoint at"),
        "train --resume (absolute)": (
            ["train", "--resume", str(outputs / long)],
            "no run folder or checkpoint at",
        ),
        "lora list": (["lora", "list", long], "no run folder"),
        "lora push": (["lora", "push", long, "--repo", "me/x"], f"no LoRA '{long}'"),
        "lora convert": (
            ["lora", "convert", f"{long}.safetensors", "o.safetensors", "--to", "kohya"],
            "LoRA file not found",
        ),
        "lora merge": (
            ["lora", "merge", f"{long}.safetensors:1", f"{long}.safetensors:1", "--out", "o.safetensors"],
            "LoRA file not found",
        ),
        "generate --lora": (
            [
                "generate",
                "--base",
                long,
                "--family",
                "flux",
                "--prompt",
                "x",
                "--out",
                "o.png",
                "--lora",
                long,
            ],
            f"no run named '{long}'",
        ),
        "generate --base": (
            ["generate", "--base", long, "--prompt", "x", "--out", "o.png"],
            "is neither a pipeline folder or checkpoint file",  # named, not its family asked (session 36)
        ),
    }
    for what, (args, said) in commands.items():
        code, printed = _run(capsys, monkeypatch, *args)
        assert code in (1, 2) and said in printed and "Traceback" not in printed, (what, printed[-400:])
    assert sorted(p.name for p in tmp_path.iterdir()) == []
