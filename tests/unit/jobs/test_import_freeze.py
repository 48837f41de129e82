"""A training process's imported libraries are frozen out of the garbage collector's passes
(lorastudio/import_freeze.py), in each process that trains (job worker, standby, rank, the
console program's `train`)."""

from __future__ import annotations

import gc
import inspect
import json
import multiprocessing
import subprocess
import sys
import time
from multiprocessing.connection import Connection

from lorastudio.import_freeze import freeze_imports
from lorastudio.jobs import rank_worker


def _full_passes(conn: Connection) -> None:
    """In a forked child: the libraries a training process imports (most of them already in the
    test process it was forked from), full collections before and after freeze_imports, every
    object the child holds unfrozen first (the test process freezes before each test)."""
    import diffusers  # noqa: F401
    import peft  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401

    gc.unfreeze()  # what the test process froze (conftest's _frozen_gc_generation): as never frozen

    def full_pass() -> float:
        t = time.perf_counter()
        gc.collect()
        return time.perf_counter() - t

    before = min(full_pass() for _ in range(3))
    frozen = freeze_imports(collect_first=True)
    after = min(full_pass() for _ in range(3))
    conn.send({"frozen": frozen, "before": before, "after": after})
    conn.close()


def test_a_full_collection_no_longer_walks_the_imported_libraries() -> None:
    """In a child forked from the test process (gc.freeze is the whole process's: never this
    one's), not a fresh interpreter: its imports of the libraries were 5-6 CPU s of the test (1.2 now)."""
    ours, theirs = multiprocessing.Pipe(duplex=False)
    child = multiprocessing.get_context("fork").Process(target=_full_passes, args=(theirs,))
    child.start()
    theirs.close()
    try:
        assert ours.poll(300), "the child did not answer"
        found = ours.recv()
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()
            child.join()
    assert child.exitcode == 0
    assert found["frozen"] > 100_000  # torch + diffusers + transformers + peft: ~450,000 objects
    assert found["after"] < found["before"] / 10, found  # 0.16 s -> microseconds on the dev host


def test_each_rank_process_freezes_after_its_imports() -> None:
    """The job worker's and the standby's freeze are seen in a run's log (test_jobs_standby); a
    rank of a multi-GPU job (torchrun, not run by the CPU suite) calls it after importing the loop."""
    source = inspect.getsource(rank_worker.run_rank)
    assert source.index("import train") < source.index("freeze_imports(")


CONSOLE = """
import atexit, json, sys
from lorastudio import import_freeze
from lorastudio.cli.app import main
sys.argv = ["lorastudio", "--version"]
# the console program ends in main() (cli/process_end.py), after its atexit handlers
atexit.register(lambda: print(json.dumps({"frozen": import_freeze.freeze_if_standalone()}), flush=True))
main()
"""


def test_the_console_program_may_freeze_and_an_in_process_caller_may_not(tmp_path) -> None:
    """`lorastudio train` as its own program (the `lorastudio` script) freezes before training
    (cli/train_cmd.py); main() called inside another program (`python -c`, a test runner: this
    one) marks nothing."""
    from lorastudio import import_freeze
    from lorastudio.cli import train_cmd

    script = tmp_path / "lorastudio"
    script.write_text(CONSOLE)
    found = []
    for argv in ([sys.executable, str(script)], [sys.executable, "-c", CONSOLE]):
        out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120)
        found.append(json.loads(out.stdout.strip().splitlines()[-1])["frozen"])
    assert found[0] > 10_000 and found[1] is None, found
    assert import_freeze.freeze_if_standalone() is None  # this runner is not the console program
    source = inspect.getsource(train_cmd)
    assert source.index("freeze_if_standalone()") < source.index("result = train(")
