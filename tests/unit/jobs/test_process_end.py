"""The console program ends without the interpreter's teardown (cli/process_end.py): its
non-daemon threads finished (a thread pool's idle worker told to end first, as the interpreter
does), its atexit handlers run, its status kept; a program that calls cli.app.main inside itself
ends as before."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lorastudio.cli.process_end import exit_status

PROGRAM = """
import atexit, sys, threading, time
from pathlib import Path
out = Path(sys.argv[1])
sys.argv = ["lorastudio", *sys.argv[2:]]
class Late:
    def __del__(self):  # a module global's: run by the interpreter's finalization only
        (out / "finalized").write_text("1")
late = Late()
def writer():
    time.sleep(0.2)  # outlives main(): the end waits for it
    (out / "thread").write_text("1")
threading.Thread(target=writer).start()
import concurrent.futures  # a thread pool's idle worker: ended by threading's exit hooks, not a join
pool = concurrent.futures.ThreadPoolExecutor(1)
pool.submit(lambda: None).result()
atexit.register(lambda: (out / "atexit").write_text("1"))
from lorastudio.cli.app import main
main()
"""


def _run(tmp_path: Path, standalone: bool, *args: str) -> tuple[int, set[str]]:
    out = tmp_path / ("console" if standalone else "inline") / "-".join(args)
    out.mkdir(parents=True)
    script = out / "lorastudio"  # the console program's name: import_freeze.mark_standalone
    script.write_text(PROGRAM)
    argv = [sys.executable, str(script)] if standalone else [sys.executable, "-c", PROGRAM]
    # (a plain join of the non-daemon threads waited forever on the pool's worker: the timeout)
    done = subprocess.run([*argv, str(out), *args], capture_output=True, text=True, timeout=300)
    return done.returncode, {p.name for p in out.iterdir()} - {"lorastudio"}


@pytest.mark.parametrize("args", [("--version",), ("train", "no-such-config.toml")])
def test_the_console_program_skips_the_teardown_and_keeps_its_status(tmp_path: Path, args: tuple) -> None:
    code, left = _run(tmp_path, True, *args)
    inline_code, inline_left = _run(tmp_path, False, *args)
    assert code == inline_code  # the command's status either way (0; a missing config's refusal)
    assert {"thread", "atexit"} <= left and "finalized" not in left  # no finalization
    assert {"thread", "atexit", "finalized"} <= inline_left  # main() inside another program


def test_exit_status_is_the_interpreters() -> None:
    assert [exit_status(None), exit_status(3), exit_status("a message")] == [0, 3, 1]
