"""The studio home lock (jobs/homelock.py): one server, or any number of CLI runs; the holder
is named in the refusal; the kernel frees it when the holder dies."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lorastudio.errors import HomeInUse
from lorastudio.jobs.homelock import HomeLock, lock_holders

HOLD = "import sys, time; from pathlib import Path; from lorastudio.jobs.homelock import HomeLock; HomeLock.{}; print('held', flush=True); time.sleep(60)"


def _holder(home: Path, call: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD.format(call)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_server_excludes_servers_and_cli_runs_and_dies_with_its_process(tmp_path: Path) -> None:
    home = tmp_path / "home"
    server = _holder(home, f"for_server(Path({str(home)!r}), 7861)")
    try:
        with pytest.raises(HomeInUse, match=rf"pid {server.pid}, port 7861.*only one server"):
            HomeLock.for_server(home, 7862)
        with pytest.raises(HomeInUse, match=rf"pid {server.pid}.*LORASTUDIO_HOME"):
            HomeLock.for_cli_run(home)
        assert lock_holders(home / "lorastudio.lock") == [server.pid]
    finally:
        server.send_signal(signal.SIGKILL)
        server.wait(10)
    with HomeLock.for_server(home, 7862) as lock:  # free at once after the kill
        assert lock.exclusive


def test_cli_runs_share_the_home_and_keep_a_server_out(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with HomeLock.for_server(home, 7000):
        pass  # a previous server's pid stays in the file: it must not be named as the holder
    run = _holder(home, f"for_cli_run(Path({str(home)!r}))")
    try:
        with (
            HomeLock.for_cli_run(home),  # a second CLI run shares it
            pytest.raises(HomeInUse, match=rf"`lorastudio train` run \(pid .*{run.pid}"),
        ):
            HomeLock.for_server(home, 7001)
    finally:
        run.kill()
        run.wait(10)
    t0 = time.monotonic()
    HomeLock.for_server(home, 7001).release()
    assert time.monotonic() - t0 < 1


def test_a_command_holding_the_home_is_named_as_that_command_not_as_a_server(tmp_path: Path) -> None:
    """`datasets delete` (at its prompt), `datasets rename`, `datasets captions`, `cache clear` and
    `cache prune` take the home to themselves. They took it as a server of no port, so meanwhile
    `lorastudio train` said "a lorastudio server (pid N, an unknown port) owns the studio home;
    train through it (... on http://127.0.0.1:None/)" and `serve` said "only one server may use a
    home": there was no server. Now the refusal names the command; and a command refused by a
    server is told to use that server, not that only one server may use a home."""
    home = tmp_path / "home"
    command = _holder(home, f"for_command(Path({str(home)!r}), 'datasets delete')")
    try:
        for take in (lambda: HomeLock.for_cli_run(home), lambda: HomeLock.for_server(home, 7863)):
            with pytest.raises(HomeInUse) as refused:
                take()
            said = str(refused.value)
            assert f"in use by `lorastudio datasets delete` (pid {command.pid})" in said, said
            assert "server" not in said and "None" not in said, said
        with pytest.raises(HomeInUse, match="in use by `lorastudio datasets delete`"):
            HomeLock.for_command(home, "cache clear")
    finally:
        command.send_signal(signal.SIGKILL)
        command.wait(10)
    with HomeLock.for_server(home, 7864), pytest.raises(HomeInUse) as refused:
        HomeLock.for_command(home, "cache clear")
    said = str(refused.value)
    assert "port 7864" in said and "`lorastudio cache clear` needs the home to itself" in said, said
    assert "only one server" not in said and "http://127.0.0.1:7864/" in said, said


@pytest.mark.parametrize("kind", ["link", "fifo", "folder"])
def test_a_lock_file_that_is_not_a_file_is_refused_naming_it(tmp_path: Path, kind: str) -> None:
    """RELIABILITY 1248: a link at `<home>/lorastudio.lock` was followed: a server or `cache prune`
    wrote its fields into the link's target (any file of the user's) and emptied it at release;
    a FIFO there failed as "Illegal seek" and a folder as "Is a directory", naming nothing. Each
    is now refused naming the file, the link's target untouched."""
    import os

    target = tmp_path / "notes.txt"
    target.write_text("the user's own words")
    path = tmp_path / "home" / "lorastudio.lock"
    path.parent.mkdir()
    if kind == "link":
        path.symlink_to(target)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    with pytest.raises(OSError, match="lock file is not a regular file") as err:
        HomeLock.for_command(tmp_path / "home", "cache prune")
    assert err.value.filename == str(path)
    assert target.read_text() == "the user's own words"
