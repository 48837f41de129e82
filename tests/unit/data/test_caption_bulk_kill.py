"""A bulk caption edit killed between two of its renames (session 28 chaos audit, RELIABILITY 656):
staged whole, then renamed file by file, a kill there left part of the edit applied and the rest
as staging a server start removed, so the edit sent again prepended twice to the first part.
Now the renames are journaled: the next holder of the dataset's lock (here the server start's
first step, `start_leftover_cleanup`) finishes them, and the edit is applied once, whole."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from lorastudio.data.writes import RENAMES_JOURNAL, dataset_lock
from lorastudio.jobs.leftovers import start_leftover_cleanup
from lorastudio.settings import Settings

# Prepend "tok, " to every caption of dataset argv[1], SIGKILLed at the edit's second rename of a
# caption into place (after the journal's own).
_KILLED_MID_RENAMES = """
import os, signal, sys
from pathlib import Path
real, calls = os.replace, []
def replace(src, dst, *args, **kwargs):
    if str(src).endswith(".tmp") and not str(dst).endswith("journal"):
        calls.append(dst)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst, *args, **kwargs)
os.replace = replace
from lorastudio.data.caption_bulk import CaptionEdit, bulk_edit_captions
bulk_edit_captions(Path(sys.argv[1]), CaptionEdit(prepend="tok, "))
"""


def _dataset(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    for stem in "abcd":
        (folder / f"{stem}.png").write_bytes(b"\x89PNG")  # never decoded: the edit reads captions
        (folder / f"{stem}.txt").write_text(f"a {stem}\n", encoding="utf-8")
    return folder


def _kill_mid_renames(folder: Path) -> None:
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_MID_RENAMES, str(folder)], capture_output=True, timeout=120
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert (folder / RENAMES_JOURNAL).is_file()
    assert (folder / "a.txt").read_text(encoding="utf-8") == "tok, a a\n"  # part of it applied
    assert (folder / "d.txt").read_text(encoding="utf-8") == "a d\n"


def test_the_next_server_start_finishes_a_killed_bulk_edit(studio_home: Path) -> None:
    settings = Settings(home=studio_home)
    folder = _dataset(settings.datasets_dir, "pets")
    _kill_mid_renames(folder)
    thread = start_leftover_cleanup(settings)
    if thread is not None:
        thread.join(30)
    assert {p.name: p.read_text(encoding="utf-8") for p in folder.glob("*.txt")} == {
        f"{s}.txt": f"tok, a {s}\n" for s in "abcd"
    }  # every caption edited once
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == []  # no journal, no staging


def test_the_next_writer_of_the_dataset_finishes_it_first(tmp_path: Path) -> None:
    folder = _dataset(tmp_path / "datasets", "pets")
    _kill_mid_renames(folder)
    with dataset_lock(folder.parent, "pets"):  # an upload, a caption edit, a CLI command
        assert not (folder / RENAMES_JOURNAL).exists()
    assert {p.name: p.read_text(encoding="utf-8") for p in folder.glob("*.txt")} == {
        f"{s}.txt": f"tok, a {s}\n" for s in "abcd"
    }
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == []
