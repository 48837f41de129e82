"""A command whose write the file system refuses (session 25 CLI audit), through the console
entry point in this process: a read-only file system, permission denied or an I/O error while
`lora convert` writes its output printed a Python traceback; now one line with the reason and
the path, status 1 (an unexpected error, README), and a full disk NoSpaceLeft's message, status 2.
The write is refused where the bytes go (safetensors' save_file raising the OSError the kernel
would: root writes through permissions, so a chmod cannot show it here)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import safetensors.torch

from cli_runner import run_cli
from lora_file import write_flux_lora


@pytest.mark.parametrize(
    ("code", "status", "said"),
    [
        (errno.EROFS, 1, "could not be written ({out}): Read-only file system; "),
        (errno.EACCES, 1, "could not be written ({out}): Permission denied; "),
        (errno.EIO, 1, "could not be written ({out}): Input/output error; "),
        (
            errno.ENOSPC,
            2,
            "error: no space left on device: the LoRA file x.safetensors could not be written ({out})",
        ),
    ],
    ids=["EROFS", "EACCES", "EIO", "ENOSPC"],
)
def test_a_refused_write_is_one_line_not_a_traceback(
    capsys, monkeypatch, tmp_path: Path, code: int, status: int, said: str
) -> None:
    src = write_flux_lora(tmp_path / "in.safetensors")
    out = tmp_path / "outs"
    out.mkdir()

    def refuse(tensors, filename, metadata=None):
        raise OSError(code, os.strerror(code), str(filename))

    monkeypatch.setattr(safetensors.torch, "save_file", refuse)
    got, text = run_cli(
        capsys, monkeypatch, "lora", "convert", str(src), str(out / "x.safetensors"), "--to", "kohya"
    )
    said = said.format(out=out / "x.safetensors")
    assert got == status and said in text and "Traceback" not in text, text
    assert list(out.iterdir()) == []  # neither the output nor its staging file


@pytest.mark.parametrize(
    ("limit", "code", "status", "said"),
    [
        (
            300,
            None,
            1,
            "error: write failed: the LoRA file x.safetensors could not be written ({out}): File too large; ",
        ),
        (
            None,
            errno.ENOSPC,
            2,
            "error: no space left on device: the LoRA file x.safetensors could not be written ({out})",
        ),
    ],
    ids=["RLIMIT_FSIZE", "safetensors-ENOSPC"],
)
def test_safetensors_own_io_errors_are_one_line_naming_the_file(
    capsys, monkeypatch, tmp_path: Path, limit: int | None, code: int | None, status: int, said: str
) -> None:
    """safetensors reports a failed write as its own SafetensorError ("Error while serializing: I/O
    error: File too large (os error 27)"), not an OSError: under `prlimit --fsize` (a real
    RLIMIT_FSIZE here) and on a full disk (its words for ENOSPC), `lora convert` printed a
    SafetensorError traceback (session 28 chaos audit). Now the write failure names the file."""
    from file_limit import file_size_limit

    src = write_flux_lora(tmp_path / "in.safetensors")
    out = tmp_path / "outs"
    out.mkdir()
    if code is not None:
        real = safetensors.torch.save_file

        def full(tensors, filename, metadata=None):
            real(tensors, filename, metadata)  # part of it (here: all) reached the disk
            raise safetensors.SafetensorError(
                f"Error while serializing: I/O error: {os.strerror(code)} (os error {code})"
            )

        monkeypatch.setattr(safetensors.torch, "save_file", full)
    args = ("lora", "convert", str(src), str(out / "x.safetensors"), "--to", "kohya")
    if limit is not None:
        with file_size_limit(limit):
            got, text = run_cli(capsys, monkeypatch, *args)
    else:
        got, text = run_cli(capsys, monkeypatch, *args)
    said = said.format(out=out / "x.safetensors")
    assert got == status and said in text and "Traceback" not in text, text
    assert list(out.iterdir()) == []  # neither the output nor its staging file
    if limit is not None:  # the limit lifted: the same command writes it
        assert run_cli(capsys, monkeypatch, *args)[0] == 0 and [p.name for p in out.iterdir()] == [
            "x.safetensors"
        ]
