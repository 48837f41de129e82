"""`python tests/cli_hang_driver.py STEP ARGS...`: `lorastudio ARGS` in a process of its own whose
run hangs after step STEP (its event sink blocks for ever in the step loop, as a deadlock would),
with the short hang allowance of the tests (jobs/process.Timeouts, as the job service's tests pass
theirs): the one-process hang watch (cli/self_watch.py) must end it (tests/unit/training/
test_cli_hang.py). Used only by the tests."""

from __future__ import annotations

import sys
import threading

from lorastudio.cli import self_watch
from lorastudio.jobs.process import Timeouts
from lorastudio.training import loop

WATCH = Timeouts(hang_min_s=2.0, hang_step_factor=5.0, stop_grace_s=0.5, kill_grace_s=0.5)


def main() -> None:
    hang_after = int(sys.argv[1])
    real = loop.train

    def hanging(config, emit, *args, **kwargs):  # type: ignore[no-untyped-def]
        def sink(event):  # type: ignore[no-untyped-def]
            emit(event)
            if event.type == "progress" and event.step >= hang_after:
                threading.Event().wait()  # never set: the step loop hangs here

        return real(config, sink, *args, **kwargs)

    loop.train = hanging
    self_watch.watch_timeouts = lambda: WATCH
    from lorastudio.cli.app import main as cli

    sys.argv = ["lorastudio", *sys.argv[2:]]
    cli()


if __name__ == "__main__":
    main()
