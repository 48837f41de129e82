"""An upload into a dataset on a file system of its own, killed mid-copy (RELIABILITY 759's
Known problem): data/cross_device.replace_into copies each file beside its target under
`.NAME.<pid>-<hex>.tmp` and renames it; a kill -9 between the two left that hidden file in the
dataset for ever (no scan lists it, and a server start's HOME_STAGING does not cover dataset
folders). Now a server start removes it once its writer's pid runs no process, in the dataset's
top level and its control folders, keeping a live writer's and a user's own hidden file."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from lorastudio.data.staging_owner import remove_stale_staging
from lorastudio.jobs.leftovers import find_leftovers, remove_leftovers
from lorastudio.settings import Settings
from lorastudio.staged_files import staging_path

# Upload a.png, a.txt and control/a.png into the existing dataset argv[2] under the datasets
# root argv[1], every move from the staging an EXDEV (the dataset on another file system), the
# process SIGKILLed at its argv[3]-th rename of a copy into the dataset (the copy whole, not yet
# renamed; the moves go a.txt, control/a.png, then a.png: images last).
_KILLED_AT_COPY = """
import errno, io, os, signal, sys
from pathlib import Path
from PIL import Image
from lorastudio.data import cross_device
from lorastudio.data.uploads import UploadBatch
root, name, nth = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
real, copies = os.replace, []
def replace(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
    if src_dir_fd is None and ".uploads" in Path(os.fsdecode(src)).parts:
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), os.fsdecode(src))
    if src_dir_fd is not None:
        copies.append(src)
        if len(copies) == nth:
            os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
cross_device.os.replace = replace
buf = io.BytesIO()
Image.new("RGB", (16, 16), (10, 200, 30)).save(buf, format="PNG")
with UploadBatch(root, root / name, 10**8) as batch:
    batch.add("a.png", io.BytesIO(buf.getvalue()))
    batch.add("a.txt", io.BytesIO(b"a green square"))
    batch.add("a.png", io.BytesIO(buf.getvalue()), slot="control")
    batch.commit()
"""


def _hidden(folder: Path) -> set[Path]:
    return {p for p in folder.rglob(".*") if p.is_file()}


@pytest.mark.parametrize(("nth", "where"), [(1, "."), (2, "control")])
def test_a_copy_killed_before_its_rename_leaves_what_a_server_start_removes(
    nth: int, where: str, settings: Settings
) -> None:
    dataset, users, staged = _killed_upload(settings, nth, where)
    live = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:  # a live upload's copy in the same folder, named as replace_into names it
        kept = _live_copy(dataset / where / "b.png", live.pid)
        found = find_leftovers(settings)
        assert staged in found and kept not in found and users not in found, found
        remove_leftovers(found)  # the next server start
        assert _hidden(dataset) == {kept.resolve(), users.resolve()}
    finally:
        live.communicate(b"")
    assert kept in find_leftovers(settings)  # its writer ended since: the next start's
    assert (dataset / "old.png").is_file()


def test_a_datasets_command_without_a_server_removes_it_too(settings: Settings) -> None:
    """The killed upload's staging (datasets/.uploads/<id>) marks it: the next `datasets`
    command or `train`, which removes that staging, removes the copy too."""
    dataset, users, staged = _killed_upload(settings, 2, "control")
    live = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        kept = _live_copy(dataset / "b.png", live.pid)
        removed = remove_stale_staging(settings.datasets_dir)  # what such a command runs first
        assert staged in removed, removed
        assert _hidden(dataset) == {kept.resolve(), users.resolve()}
    finally:
        live.communicate(b"")
    assert remove_stale_staging(settings.datasets_dir) == []  # no killed upload left: nothing
    assert kept.exists()


def _killed_upload(settings: Settings, nth: int, where: str) -> tuple[Path, Path, Path]:
    """(the dataset, a user's hidden file in it, the copy left) of an upload into datasets/pets
    SIGKILLed at its nth copy's rename (`_KILLED_AT_COPY`)."""
    dataset = settings.datasets_dir / "pets"
    (dataset / "control").mkdir(parents=True)
    Image.new("RGB", (16, 16)).save(dataset / "old.png")
    users = dataset / ".notes.123.tmp"  # a user's own hidden file: no staging name (no id)
    users.write_text("mine", encoding="utf-8")
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_AT_COPY, str(settings.datasets_dir), "pets", str(nth)],
        capture_output=True,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    staged = [p for p in _hidden(dataset) if p != users]
    assert [p.parent for p in staged] == [(dataset / where).resolve()], staged  # the killed copy
    return dataset, users, staged[0]


def _live_copy(target: Path, pid: int) -> Path:
    """A copy of `target` being made by live process `pid`, named as replace_into names it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("os.getpid", lambda: pid)
        kept = staging_path(target)
    kept.write_bytes(b"being copied")
    return kept
