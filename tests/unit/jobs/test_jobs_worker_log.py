"""The worker's log tee (jobs/worker_log.py) in a real child process: what the process writes to
fds 1 and 2 (Python and C level) and its log records land in the file and still reach the
terminal; a log past its size limit is rotated, keeping its newest lines (the API's tail)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import logging, os, sys
from pathlib import Path
from lorastudio.jobs.worker_log import WorkerLog
log = WorkerLog(Path(sys.argv[1]), limit=int(sys.argv[2])).start()
print("from print")
os.write(2, b"from fd 2\\n")
logging.getLogger("lorastudio.worker").info("a log record")
logging.getLogger("lorastudio.worker").warning("a warning")
print("x" * int(sys.argv[3]))
log.close()
print("after close")
"""


def _run(tmp_path: Path, limit: int, extra: int) -> tuple[str, subprocess.CompletedProcess[str]]:
    path = tmp_path / "logs" / "run.log"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path), str(limit), str(extra)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return path.read_text(), done


def test_the_tee_keeps_every_line_and_the_terminal_still_sees_them(tmp_path: Path) -> None:
    text, done = _run(tmp_path, 1 << 20, 10)
    assert "from print\n" in text and "from fd 2\n" in text and "x" * 10 in text
    assert "INFO lorastudio.worker: a log record" in text  # log records: the file only
    assert "after close" not in text
    terminal = done.stdout + done.stderr
    assert "from print" in terminal and "from fd 2" in terminal and "after close" in terminal
    assert "a log record" not in terminal
    assert text.count("WARNING lorastudio.worker: a warning") == 1 and "a warning" in terminal


def test_every_line_in_the_file_says_when_it_came(tmp_path: Path) -> None:
    """A library's warning or a traceback (the process's own output) carries the time in the
    file as the log records do; the terminal copy is as printed. Before, only log records had
    one: "from print" and a library's warning stood bare in the log."""
    text, done = _run(tmp_path, 1 << 20, 10)
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}[+-]\d{4} "  # local, with its UTC offset
    lines = text.splitlines()
    assert len(lines) == 5 and all(re.match(stamp, line) for line in lines), lines
    assert any(re.fullmatch(stamp + "from print", line) for line in lines)
    assert any(re.fullmatch(stamp + "from fd 2", line) for line in lines)
    assert any(re.fullmatch(stamp + "x" * 10, line) for line in lines)
    assert any(
        re.fullmatch(stamp + "WARNING lorastudio.worker: a warning", line) for line in lines
    )  # one stamp
    assert re.search("^from print$", done.stdout + done.stderr, re.MULTILINE)  # the terminal: as printed


LONG_RUN = """
import logging, sys
from pathlib import Path
from lorastudio.jobs.worker_log import WorkerLog
log = WorkerLog(Path(sys.argv[1]), limit=4000).start()
for step in range(1, 501):  # the engine's records (the worker logs each event)
    logging.getLogger("lorastudio.worker").info("step %d/500 loss 0.1234", step)
print("Traceback (most recent call last): the run's end")
log.close()
"""


def test_a_log_past_its_limit_keeps_its_newest_lines(tmp_path: Path) -> None:
    """A long run's log (500 step records, 37 KB, into a 4 KB limit) then its crash: the file and
    its rotated part hold at most the limit and end with the crash, which the API's tail shows
    after the steps before it, in order. Before, the file stopped at the limit: the tail ended
    with "[log truncated ...]" at step ~50, the crash lost."""
    from lorastudio.jobs.worker_log import read_tail, rotated_path

    path = tmp_path / "logs" / "run.log"
    done = subprocess.run(
        [sys.executable, "-c", LONG_RUN, str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    rotated = rotated_path(path)
    assert path.stat().st_size + rotated.stat().st_size <= 4000 + 200  # + the rotation's line
    assert path.read_text().endswith(" Traceback (most recent call last): the run's end\n")
    assert "step 1/500 " not in path.read_text() + rotated.read_text()  # the oldest dropped
    tail = read_tail(path, 100)
    assert tail.lines[-1].endswith(" Traceback (most recent call last): the run's end")
    assert tail.lines[0].startswith("[log rotated: older lines were dropped")  # the rotated part's first
    steps = [int(line.split("step ")[1].split("/")[0]) for line in tail.lines if " step " in line]
    assert steps == list(range(steps[0], 501)) and len(steps) > 30, steps  # both parts, in order
    assert tail.size_bytes == path.stat().st_size + rotated.stat().st_size


SPLIT_LINE = """
import logging, os, sys, time
from pathlib import Path
from lorastudio.jobs.worker_log import WorkerLog
log = WorkerLog(Path(sys.argv[1])).start()
os.write(1, b"first half")  # a line written in two pieces (as print writes its text, then end)
time.sleep(0.3)  # the copy thread has read the first piece
logging.getLogger("lorastudio.worker").info("a record between the pieces")
os.write(1, b", second half\\n")
log.close()
"""


def test_a_record_between_a_lines_two_writes_does_not_split_the_line(tmp_path: Path) -> None:
    """Seen in CI under load: 'from print' + a log record + '\\n' in the file. The copy thread
    writes whole lines to the file, so a record written straight to it lands between lines."""
    path = tmp_path / "run.log"
    done = subprocess.run(
        [sys.executable, "-c", SPLIT_LINE, str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    text = path.read_text()
    assert "first half, second half\n" in text, text
    assert "INFO lorastudio.worker: a record between the pieces\n" in text, text
    assert "first half, second half" in done.stdout + done.stderr  # the terminal sees it too
