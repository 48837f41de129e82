"""`file_size_limit(n)`: a real RLIMIT_FSIZE on this process for a block, as `prlimit --fsize=N`
sets it on a command: a write past byte `n` of any file fails with EFBIG (Python ignores
SIGXFSZ from its start, so the write fails instead of the signal ending the process). The soft
limit only: it is put back at the block's end. Keep the block to the write under test: every
file the process writes meanwhile (a log, the run store) has the same limit."""

from __future__ import annotations

import resource
import signal
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def file_size_limit(n: int) -> Iterator[None]:
    """Limit every file this process writes to `n` bytes for the block (EFBIG past it)."""
    assert signal.getsignal(signal.SIGXFSZ) == signal.SIG_IGN, "a write past the limit would kill the process"
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (n, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
