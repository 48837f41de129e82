"""The hub cache listing stays bounded whatever the cache holds (basemodels/hubscan.py): a FIFO
ref, a ref linked to /dev/zero, a huge ref, a folder link loop, a tree deeper than MAX_DEPTH, a
link to a missing blob. huggingface_hub's scan_cache_dir hung on the FIFO and read /dev/zero
until the out-of-memory kill; every listing here runs in a child whose address space is capped
(RLIMIT_AS), so even the old code's /dev/zero read ends in a MemoryError, never an OOM kill."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from lorastudio.basemodels import hubscan
from lorastudio.basemodels.hubcache import cached_snapshot

GOOD = "a" * 40
OTHER = "b" * 40
CAP = 2 << 30  # the child's address space: far below what /dev/zero would fill


def _repo(cache: Path, name: str, commit: str = GOOD, ref: str | None = GOOD) -> Path:
    storage = cache / f"models--{name.replace('/', '--')}"
    (storage / "blobs").mkdir(parents=True)
    (storage / "blobs" / "x1").write_bytes(b"w" * 1000)
    snap = storage / "snapshots" / commit / "unet"
    snap.mkdir(parents=True)
    (snap / "w.safetensors").symlink_to(storage / "blobs" / "x1")
    (snap.parent / "model_index.json").symlink_to(storage / "blobs" / "x1")  # one blob, counted once
    (storage / "refs").mkdir()
    if ref is not None:
        (storage / "refs" / "main").write_text(ref)
    return storage


def _hostile_cache(cache: Path) -> None:
    _repo(cache, "ok/good")
    os.mkfifo(_repo(cache, "bad/fifo", ref=None) / "refs" / "main")
    (_repo(cache, "bad/zero", ref=None) / "refs" / "main").symlink_to("/dev/zero")
    with open(_repo(cache, "bad/huge", ref=None) / "refs" / "main", "wb") as f:
        f.truncate(1 << 40)  # sparse: a terabyte that takes no disk
    loop = _repo(cache, "bad/loop") / "snapshots" / GOOD / "unet"
    (loop / "again").symlink_to(loop, target_is_directory=True)
    (loop / "self").symlink_to(loop / "self")  # a file link loop
    (loop / "gone").symlink_to(loop / "missing-blob")
    (loop / "dev").symlink_to("/dev/zero")
    deep = _repo(cache, "bad/deep") / "snapshots" / GOOD
    deep = deep.joinpath(*["d"] * (hubscan.MAX_DEPTH + 2))
    deep.mkdir(parents=True)
    (_repo(cache, "bad/refdir", ref=None) / "refs" / "main").mkdir()
    _repo(cache, "bad/garbage", ref="not a commit\n")


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))


def test_hostile_hub_cache_lists_bounded(tmp_path: Path) -> None:
    cache = tmp_path / "hub"
    _hostile_cache(cache)
    code = (
        "import json, sys, pathlib; from lorastudio.basemodels.hubcache import cached_repos, cached_snapshot;"
        "cache = pathlib.Path(sys.argv[1]);"
        # cached_snapshot reads a ref too: the FIFO and the /dev/zero link are no snapshot
        "assert cached_snapshot('bad/fifo', cache_dir=cache) is None;"
        "assert cached_snapshot('bad/zero', cache_dir=cache) is None;"
        "print(json.dumps([[r.repo_id, r.commit, r.size_bytes] for r in cached_repos(cache)]))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    # the timeout only ends the old code's hang on the FIFO; the listing itself takes milliseconds
    done = subprocess.run(
        [sys.executable, "-c", code, str(cache)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_cap_memory,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    listed = {repo: (commit, size) for repo, commit, size in json.loads(done.stdout)}
    # a repo whose ref is damaged still lists its only snapshot (by date), as a refless one does
    assert listed["ok/good"] == (GOOD, 1000)
    for repo in ("bad/fifo", "bad/zero", "bad/huge", "bad/refdir", "bad/garbage", "bad/loop"):
        assert listed[repo] == (GOOD, 1000), repo
    assert "bad/deep" not in listed  # skipped with a note: deeper than MAX_DEPTH
    assert "ref 'main' skipped" in done.stderr and "more than 32 folders deep" in done.stderr


def test_refs_are_refused_before_any_read(tmp_path: Path) -> None:
    """In this process: each read is refused at its open (never a read of the FIFO or /dev/zero)."""
    cache = tmp_path / "hub"
    _hostile_cache(cache)
    for name, why in (("fifo", "not a regular file"), ("huge", "bytes"), ("refdir", "regular")):
        with pytest.raises((hubscan.RepoDamaged, OSError), match=why):
            hubscan.read_ref(cache / f"models--bad--{name}" / "refs" / "main")
    with pytest.raises(OSError):  # O_NOFOLLOW: the /dev/zero link is never opened
        hubscan.read_ref(cache / "models--bad--zero" / "refs" / "main")
    assert hubscan.read_ref(cache / "models--ok--good" / "refs" / "main") == GOOD
    assert cached_snapshot("ok/good", cache_dir=cache) == cache / "models--ok--good" / "snapshots" / GOOD


def test_main_ref_wins_over_a_newer_snapshot(tmp_path: Path) -> None:
    cache = tmp_path / "hub"
    storage = _repo(cache, "ok/two")
    newer = storage / "snapshots" / OTHER
    newer.mkdir()
    (storage / "blobs" / "x2").write_bytes(b"v" * 10)
    (newer / "f").symlink_to(storage / "blobs" / "x2")
    os.utime(storage / "blobs" / "x2", (2e9, 2e9))
    scan = hubscan.scan_hub_cache(cache)
    assert {r.commit: r.refs for r in scan.repos["ok/two"]} == {GOOD: frozenset({"main"}), OTHER: frozenset()}
    from lorastudio.basemodels.hubcache import cached_repos

    assert [(r.commit, r.size_bytes) for r in cached_repos(cache)] == [(GOOD, 1000)]
    (storage / "refs" / "main").unlink()
    assert [(r.commit, r.size_bytes) for r in cached_repos(cache)] == [(OTHER, 10)]


def test_a_refs_folder_that_is_a_link_or_a_fifo_costs_its_refs(tmp_path: Path) -> None:
    cache = tmp_path / "hub"
    linked = _repo(cache, "bad/linkedrefs", ref=None)
    (linked / "refs").rmdir()
    (linked / "refs").symlink_to("/dev", target_is_directory=True)  # never walked: no device opened
    fifo = _repo(cache, "bad/fiforefs", ref=None)
    (fifo / "refs").rmdir()
    os.mkfifo(fifo / "refs")
    scan = hubscan.scan_hub_cache(cache)
    assert {repo: [r.refs for r in revs] for repo, revs in scan.repos.items()} == {
        "bad/linkedrefs": [frozenset()],
        "bad/fiforefs": [frozenset()],
    }
    assert len(scan.notes) == 2, scan.notes
