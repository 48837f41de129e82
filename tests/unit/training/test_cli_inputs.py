"""A command-line user's input files and `--set` overrides (session 25 CLI audit), through the
console entry point in this process (tests/cli_runner.py): a config saved with a UTF-8 byte-order
mark, one that is not UTF-8, a folder or a named pipe given where a file is expected, and a
malformed `--set` beside the file's own problems."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cli_runner import run_cli
from lorastudio.cli.config_file import load_config_file


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_a_config_saved_with_a_byte_order_mark_is_read(tmp_path: Path, suffix: str) -> None:
    """Windows' Notepad writes a UTF-8 BOM first: tomllib refused it as "Invalid statement (at
    line 1, column 1)", json as "Unexpected UTF-8 BOM"."""
    path = tmp_path / f"run{suffix}"
    text = 'family = "flux"\nsteps = 3\n' if suffix == ".toml" else '{"family": "flux", "steps": 3}'
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert load_config_file(path) == {"family": "flux", "steps": 3}


def test_a_config_that_is_not_utf8_names_the_line_and_column(capsys, monkeypatch, tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_bytes(b'family = "flux"\n\nprompt = "caf\xe9"\n')  # Latin-1
    code, out = run_cli(capsys, monkeypatch, "train", str(path))
    assert code == 2, out
    assert f"cannot read {path}: not UTF-8 text: byte 0xe9 at line 3, column 14" in out, out


def test_a_folder_or_a_pipe_given_as_a_file_is_named_so(capsys, monkeypatch, tmp_path: Path) -> None:
    """Each was "PATH not found" (or "LoRA file not found: PATH") while it was right there."""
    folder = tmp_path / "a.toml"
    folder.mkdir()
    pipe = tmp_path / "p.safetensors"
    os.mkfifo(pipe)
    code, out = run_cli(capsys, monkeypatch, "train", str(folder))
    assert code == 2 and f"config: {folder} is a folder, not a file" in out, out
    code, out = run_cli(
        capsys, monkeypatch, "lora", "convert", str(pipe), str(tmp_path / "o.safetensors"), "--to", "kohya"
    )
    assert code == 2 and f"LoRA file {pipe} is a named pipe, socket or device, not a file" in out, out
    code, out = run_cli(capsys, monkeypatch, "lora", "resize", str(folder), "--rank", "1", "--out", str(tmp_path / "o.safetensors"))  # fmt: skip
    assert code == 2 and f"LoRA file {folder} is a folder, not a file" in out, out
    assert not (tmp_path / "o.safetensors").exists()


def test_a_malformed_set_is_listed_with_the_files_problems(capsys, monkeypatch, tmp_path: Path) -> None:
    """Every problem at once: a malformed `--set` was reported alone, the file's unknown key and
    bad value only on the next try."""
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"family": "flux", "base_model": "none", "data_dir": "none", "stpes": 3}))
    code, out = run_cli(
        capsys, monkeypatch, "train", str(config), "--check", "--set", "steps", "--set", "lora_rank=0"
    )
    assert code == 2, out
    for said in (
        "--set: 'steps' is not key=value",
        "stpes: unknown setting; did you mean steps?",
        "lora_rank:",
    ):
        assert said in out, out


def test_resume_takes_a_runs_name_under_outputs(capsys, monkeypatch, tmp_path: Path) -> None:
    """`train --resume NAME` looked for NAME in the current directory only ("no run folder or
    checkpoint at ./NAME"), while `lora list NAME` and `generate --lora NAME` take a run's name."""
    from lorastudio.settings import get_settings

    run = get_settings().ensure_dirs().outputs_dir / "named"
    run.mkdir()
    (run / "notes.txt").write_text("mine")  # not a killed run's leftover: the folder stays
    monkeypatch.chdir(tmp_path)
    code, out = run_cli(capsys, monkeypatch, "train", "--resume", "named", "--device", "cpu")
    assert code == 2 and f"{run} holds no checkpoint to resume from" in out, out
    (tmp_path / "named").mkdir()  # a folder of that name here is the one meant
    code, out = run_cli(capsys, monkeypatch, "train", "--resume", "named", "--device", "cpu")
    assert code == 2 and f"{tmp_path / 'named'} holds no checkpoint" in out, out


def test_a_config_file_over_the_cap_is_refused_unread_and_a_link_loop_named(tmp_path: Path) -> None:
    """A 2 GB sparse `config.json` was read whole into memory (then failed to parse); one byte
    over the cap here, so that the old code's failure costs 4 MB."""
    from lorastudio.config_import.reading import MAX_BYTES
    from lorastudio.errors import ConfigError

    huge = tmp_path / "huge.json"
    with huge.open("wb") as fh:
        fh.truncate(MAX_BYTES + 1)  # sparse: no disk used
    with pytest.raises(ConfigError, match=rf"huge.json is {MAX_BYTES + 1} bytes: .* at most {MAX_BYTES}"):
        load_config_file(huge)
    loop = tmp_path / "loop.toml"
    loop.symlink_to(loop)
    with pytest.raises(ConfigError, match="loop.toml"):
        load_config_file(loop)
