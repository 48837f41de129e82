"""Killed single-file writers of the studio home (session 28 chaos audit, Known problems): each
staged its file (`.added_models.json.<pid>.tmp`, a claim's `.<key>.<pid>-<hex>.holder.tmp`, a
caption job record's `.<id>.<pid>.tmp`, ...) and renamed it; a kill -9 between left the staging
file, which no server start removed. Now every one stages as lorastudio/staged_files.py names it
and a server start removes those whose writer (the pid in the name) is gone, keeping a live one's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lorastudio.jobs.leftovers import find_leftovers, remove_leftovers
from lorastudio.settings import Settings
from lorastudio.staged_files import staging_path

# Run writer argv[2] on home argv[1], SIGKILLed (no cleanup) at its rename of a staged file.
_KILLED_AT_RENAME = """
import os, signal, sys
from pathlib import Path
home, writer = Path(sys.argv[1]), sys.argv[2]
real = os.replace
def replace(src, dst, *args, **kwargs):
    if Path(src).name.startswith(".") and Path(src).name.endswith(".tmp"):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst, *args, **kwargs)
os.replace = replace
if writer == "added":
    from lorastudio.basemodels.added import add_folder
    from lorastudio.settings import Settings
    add_folder(Settings(home=home), sys.argv[3])
elif writer == "claim":
    from lorastudio.jobs.dataset_claims import WRITE, DatasetClaim
    DatasetClaim.take(home, home / "datasets", [home / "datasets" / "pets"], WRITE, "a test")
elif writer == "caption-record":
    from lorastudio.jobs.caption_records import owner, write_record
    write_record(home, {"id": "0123abcd"}, owner("cli"))
elif writer == "timings":
    from lorastudio.timings import write_record
    write_record(home, "run1", {})
elif writer == "signature":
    from lorastudio.training.inputs.text_signature import write_signature
    write_signature(home / "cache" / "text-signatures" / "m-0.json", {"t5": ("float32", (4,))})
"""

WRITERS = ["added", "claim", "caption-record", "timings", "signature"]


def _files(home: Path) -> set[Path]:
    return {p for p in home.rglob("*") if p.is_file()}


@pytest.mark.parametrize("writer", WRITERS)
def test_a_writer_killed_before_its_rename_leaves_what_a_server_start_removes(
    writer: str, settings: Settings, tmp_path: Path
) -> None:
    (settings.datasets_dir / "pets").mkdir(parents=True)
    model = tmp_path / "a-model"
    model.mkdir()
    before = _files(settings.home)
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_AT_RENAME, str(settings.home), writer, str(model)],
        capture_output=True,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    staged = [p for p in _files(settings.home) - before if p.name.endswith(".tmp")]
    assert len(staged) == 1, staged  # the killed write's staging file
    live = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:  # a live writer's staging file in the same folder, named as the rule names it
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("os.getpid", lambda: live.pid)
            kept = staging_path(staged[0].parent / "other.json")
        kept.write_text("{}", encoding="utf-8")
        found = find_leftovers(settings)
        assert staged[0] in found and kept not in found, found
        remove_leftovers(found)
        assert not staged[0].exists() and kept.exists()
    finally:
        live.communicate(b"")
    assert find_leftovers(settings) == [kept]  # its writer ended since: the next start's


# The staging names an older lorastudio wrote in the home without a pid (RELIABILITY 824), one
# of each folder's; a server start removes each once a day old, never a younger one.
OLDER_NAMES = {  # folder: (a day old: removed, an hour old: kept)
    "claims": (".0123abcd.4242-abcdef.holder.tmp", ".4567cdef.4243-abcdef.holder.tmp"),
    "run_timings": ("20261201-120000-run1.json.part", "20261205-120000-run2.json.part"),
    "cache/decoded": (f".{'e' * 32}.json.{'0' * 32}.tmp", f".{'d' * 32}.json.{'1' * 32}.tmp"),
    "cache/thumbs/ab": (f".{'ab' * 16}.jpg.{'2' * 32}.tmp", f".{'ab' * 16}.jpg.{'3' * 32}.tmp"),
    "cache/attention-probe": (".probe-k3j_9x2a.json", ".probe-0aq_ln4z.json"),
}


def test_an_older_writers_staging_goes_once_a_day_old(settings: Settings) -> None:
    day_ago, hour_ago = time.time() - 25 * 3600, time.time() - 3600
    aged, young = [], []
    for folder, (old_name, new_name) in OLDER_NAMES.items():
        (settings.home / folder).mkdir(parents=True, exist_ok=True)
        old, new = settings.home / folder / old_name, settings.home / folder / new_name
        for path, when in ((old, day_ago), (new, hour_ago)):
            path.write_text("{}", encoding="utf-8")
            os.utime(path, (when, when))
        aged.append(old)
        young.append(new)
    link = settings.home / "cache/decoded" / f".{'f' * 32}.json.{'1' * 32}.tmp"
    link.symlink_to(aged[0])
    os.utime(link, (day_ago, day_ago), follow_symlinks=False)
    found = find_leftovers(settings)
    assert sorted(p for p in found if p in aged) == sorted(aged), found
    assert not {*young, link} & set(found), found
    remove_leftovers(found)
    assert not any(p.exists() for p in aged) and all(p.exists() for p in young) and link.is_symlink()
