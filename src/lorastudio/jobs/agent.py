"""`python -m lorastudio.jobs.agent SERVER_PID TORCHRUN_ARGS...`: torchrun, bound to the job
service's lifetime.

This is torchrun itself (`torch.distributed.run.main`, the elastic agent that starts one process
per rank, watches them and tears the group down when one fails), run after the process has
bound itself to the server like the single worker does: PR_SET_PDEATHSIG(SIGKILL) plus a
watchdog on the parent pid (jobs/worker.py `bind_to_parent`). Arming the death signal here
instead of in a Popen preexec_fn keeps fork-time code out of the threaded server. The agent's
pid goes to the ranks in LORASTUDIO_AGENT_PID so that each binds itself to the agent in turn:
server dies -> agent dies -> every rank dies. Under `lorastudio train --gpus N` it also keeps how
each failed rank ended, for the command to name the cause (jobs/launch_report.py).
"""

from __future__ import annotations

import os
import sys

from lorastudio.jobs.channel import AGENT_PID_ENV
from lorastudio.jobs.launch_report import write_failures
from lorastudio.jobs.worker import bind_to_parent


def main(argv: list[str] | None = None) -> None:
    """Bind to SERVER_PID (argv[0]), then run torchrun with the rest of argv. Exits 3 when the
    server is already gone; 128 + N after signal N (a Ctrl-C: 130), once torchrun has passed it
    to the ranks and they ended (a rank that has not after 30 s is killed), without torchrun's
    traceback (RELIABILITY 393); otherwise torchrun's own exit (non-zero when a rank failed)."""
    args = sys.argv[1:] if argv is None else argv
    if not args or not args[0].isdigit():
        raise SystemExit("usage: python -m lorastudio.jobs.agent SERVER_PID [torchrun arguments]")
    bind_to_parent(int(args[0]))
    os.environ[AGENT_PID_ENV] = str(os.getpid())
    from torch.distributed.elastic.multiprocessing import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun_main

    try:
        torchrun_main(args[1:])
    except ChildFailedError as failed:  # a CLI launch names the failed rank from this (RELIABILITY 391)
        write_failures({rank: (f.pid, f.exitcode) for rank, f in failed.failures.items()})
        raise
    except SignalException as signalled:  # the ranks got the signal and ended: the launch's status
        raise SystemExit(128 + int(signalled.sigval)) from None


if __name__ == "__main__":
    main()
