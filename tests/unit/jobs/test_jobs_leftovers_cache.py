"""Crash leftovers of the on-disk encode cache (data/disk_cache.py, jobs/leftovers.py): a staged
shard or a folder renamed aside for removal is removed when its writer's process is gone, kept
while it lives; finished shards are kept."""

from __future__ import annotations

import os
import subprocess
import sys

from lorastudio.data.disk_cache import cache_root
from lorastudio.jobs.leftovers import find_leftovers, remove_leftovers
from lorastudio.settings import Settings


def test_staged_shards_of_dead_writers_are_removed_and_the_rest_kept(settings: Settings) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    gone, alive = int(dead.stdout), os.getpid()
    key = "ab" + "0" * 62
    folder = cache_root(settings) / "latents" / "vae1" / "ab"
    folder.mkdir(parents=True)
    shard = folder / f"{key}.safetensors"
    staged_dead = folder / f".{key}.safetensors.{gone}.tmp"
    staged_live = folder / f".{key}.safetensors.{alive}.tmp"
    aside = cache_root(settings) / "text" / f".enc1.removing.{gone}"  # an older clear's name
    aside_new = cache_root(settings) / "text" / f".enc2.removing.{gone}.0123abcd"
    aside_live = cache_root(settings) / "text" / f".enc3.removing.{alive}.0123abcd"
    for folder_aside in (aside, aside_new, aside_live):
        (folder_aside / "cd").mkdir(parents=True)
        (folder_aside / "cd" / "x.safetensors").write_bytes(b"x")
    for path in (shard, staged_dead, staged_live):
        path.write_bytes(b"x")
    assert find_leftovers(settings) == sorted([staged_dead, aside, aside_new])
    remove_leftovers(find_leftovers(settings))
    assert shard.exists() and staged_live.exists() and aside_live.exists()
    assert not staged_dead.exists() and not aside.exists() and not aside_new.exists()
