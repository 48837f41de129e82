"""The encode cache's cap (data/cache_prune.py): a prune removes whole entries, least recently
used first, never one a run holds (cache_io.hold_entry) nor one holding files the cache did not
write; a run's end prunes; a run after a prune re-encodes what was pruned and trains the same."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from lorastudio import families
from lorastudio.data.cache_io import hold_entry
from lorastudio.data.cache_prune import GB, cap_bytes, prune_cache, prune_to_cap
from lorastudio.data.disk_cache import ENTRY_LOCK, cache_root, cache_stats
from lorastudio.settings import Settings, get_settings
from lorastudio.training.loop import train

OLD, OLDER, OLDEST, NEWEST = "b" * 20, "c" * 20, "a" * 20, "d" * 20  # encoder fingerprints


def _entry(root: Path, model: str, used_at: float | None, kind: str = "latents") -> Path:
    """An entry of two shards (4 KiB of latents each), last used at `used_at` (its lock's mtime)."""
    folder = root / kind / model
    for name in ("11", "22"):
        shard = folder / name / f"{name * 32}.safetensors"
        shard.parent.mkdir(parents=True, exist_ok=True)
        save_file({"mean": torch.zeros(1024)}, str(shard))
    if used_at is not None:
        os.close(hold_entry(root, kind, model))  # as a run takes it, then its end
        os.utime(folder / ENTRY_LOCK, (used_at, used_at))
    return folder


def test_the_cap_removes_the_oldest_unused_entries_first(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    oldest = _entry(root, OLDEST, 1_000)
    older = _entry(root, OLDER, 2_000, kind="text")
    old = _entry(root, OLD, 3_000)
    newest = _entry(root, NEWEST, 4_000)
    size = cache_stats(root)[0].bytes
    held = hold_entry(root, "latents", OLDEST)  # a live run reads the oldest: it stays
    assert held is not None
    assert os.stat(oldest / ENTRY_LOCK).st_mtime > 4_000  # holding it is its use
    os.utime(oldest / ENTRY_LOCK, (1_000, 1_000))
    try:
        result = prune_cache(root, cap=2 * size)
    finally:
        os.close(held)
    assert [(s.kind, s.model) for s in result.removed] == [("text", OLDER), ("latents", OLD)]
    assert [s.model for s in result.in_use] == [OLDEST]
    assert (result.before_bytes, result.after_bytes, result.freed_bytes) == (4 * size, 2 * size, 2 * size)
    assert oldest.is_dir() and newest.is_dir() and not older.exists() and not old.exists()
    assert sorted(p.name for p in (root / "latents").iterdir()) == [OLDEST, NEWEST]  # nothing aside left
    assert prune_cache(root, cap=2 * size).removed == []  # at the cap: nothing to do
    assert [s.model for s in prune_cache(root, cap=0).removed] == [OLDEST, NEWEST]  # released now


def test_an_entry_used_after_the_clock_was_set_back_is_not_the_least_recently_used(tmp_path: Path) -> None:
    import time

    root = tmp_path / "cache"
    ahead = time.time() + 3600  # used an hour ago, before the clock was set back an hour
    before = _entry(root, OLD, ahead)
    after = _entry(root, NEWEST, None)
    size = cache_stats(root)[0].bytes
    os.close(hold_entry(root, "latents", NEWEST))  # a run reads it now: its last use
    assert os.stat(after / ENTRY_LOCK).st_mtime > os.stat(before / ENTRY_LOCK).st_mtime
    assert [s.model for s in prune_cache(root, cap=size).removed] == [OLD]
    assert after.is_dir() and not before.exists()


def test_an_entry_held_by_another_process_is_never_removed(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    _entry(root, OLDEST, 1_000)
    newest = _entry(root, NEWEST, 2_000)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
                import sys
                from pathlib import Path
                from lorastudio.data.cache_io import hold_entry
                fd = hold_entry(Path({str(root)!r}), "latents", {NEWEST!r})
                print("held" if fd is not None else "none", flush=True)
                sys.stdin.read()
            """),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        result = prune_cache(root, cap=0)
        assert [s.model for s in result.removed] == [OLDEST] and [s.model for s in result.in_use] == [NEWEST]
        assert len(list(newest.rglob("*.safetensors"))) == 2
    finally:
        holder.communicate("")
    assert [s.model for s in prune_cache(root, cap=0).removed] == [NEWEST]  # its holder is gone


def test_foreign_files_and_entries_from_before_the_lock(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    legacy = _entry(root, OLDEST, None)  # written before entries had a lock: its folders' mtime
    os.utime(legacy, (500, 500))
    for prefix in legacy.iterdir():
        os.utime(prefix, (500, 500))
    mine = _entry(root, OLD, 1_000)
    (mine / "11" / "notes.txt").write_text("the user's")
    _entry(root, NEWEST, 2_000)
    size = cache_stats(root)[0].bytes
    result = prune_cache(root, cap=size)  # the oldest, then past the kept foreign one, the newest
    assert [s.model for s in result.removed] == [OLDEST, NEWEST] and [s.model for s in result.foreign] == [
        OLD
    ]
    assert (mine / "11" / "notes.txt").read_text() == "the user's"


def test_the_default_cap_is_a_share_of_the_space_the_cache_could_have(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import lorastudio.data.cache_prune as cache_prune

    root = Path("/nowhere")
    monkeypatch.setattr(cache_prune, "_free_bytes", lambda folder: 10 * GB)
    assert cap_bytes(Settings(), root, 2 * GB) == 6 * GB  # half of 2 + 10 GB
    monkeypatch.setattr(cache_prune, "_free_bytes", lambda folder: 1000 * GB)
    assert cap_bytes(Settings(), root, 2 * GB) == 50 * GB  # at most DEFAULT_MAX_GB
    assert cap_bytes(Settings(cache_max_gb=1.5), root, 2 * GB) == int(1.5 * GB)
    monkeypatch.setenv("LORASTUDIO_CACHE_MAX_GB", "0.25")
    assert Settings().cache_max_gb == 0.25
    monkeypatch.setenv("LORASTUDIO_CACHE_MAX_GB", "-1")
    with pytest.raises(ValueError, match="cache_max_gb"):
        Settings()


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    cls = type(families.get("flux"))
    real, calls = cls.encode_pixels, []

    def counting(self, vae, pixels):  # images per VAE call
        calls.append(int(pixels.shape[0]))
        return real(self, vae, pixels)

    monkeypatch.setattr(cls, "encode_pixels", counting)
    return calls


def _run(make_config, name: str):
    events: list = []
    settings = {"latent_cache": "disk", "random_flip": True, "cache_variants": 2, "steps": 3}
    return train(make_config(output_name=name, **settings), events.append, device="cpu")


def test_a_run_prunes_at_its_end_and_a_run_after_a_prune_re_encodes_and_trains_the_same(
    make_config, monkeypatch: pytest.MonkeyPatch
) -> None:
    encodes = _counting(monkeypatch)
    root = cache_root(get_settings())
    first = _run(make_config, "first")
    assert len(encodes) == 4
    own = {(s.kind, s.model) for s in cache_stats(root)}
    assert {kind for kind, _ in own} == {"latents", "text"}
    stale = _entry(root, OLDEST, 1_000)  # another model's entry, unused since long ago
    total = sum(s.bytes for s in cache_stats(root))
    monkeypatch.setenv("LORASTUDIO_CACHE_MAX_GB", str((total - 1) / GB))  # one entry too many
    get_settings.cache_clear()
    encodes.clear()
    second = _run(make_config, "second")  # reads the cache, then prunes at its end
    assert encodes == [] and second.losses == first.losses
    assert not stale.exists() and {(s.kind, s.model) for s in cache_stats(root)} == own
    result = prune_to_cap(get_settings(), max_gb=0)  # `cache prune --max-gb 0`: no run holds any
    assert {(s.kind, s.model) for s in result.removed} == own and cache_stats(root) == []
    third = _run(make_config, "third")
    assert len(encodes) == 4  # every image encoded again
    assert third.losses == first.losses
    assert first.lora_path is not None and third.lora_path is not None
    a, b = load_file(first.lora_path), load_file(third.lora_path)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_cli_prune_takes_the_home_like_clear() -> None:
    from typer.testing import CliRunner

    from lorastudio.cli.app import _register, app
    from lorastudio.jobs.homelock import HomeLock

    if not app.registered_commands:
        _register()
    root = cache_root(get_settings())
    old, new = _entry(root, OLDEST, 1_000), _entry(root, NEWEST, 2_000)
    size = cache_stats(root)[0].bytes
    listed = CliRunner().invoke(app, ["cache", "ls"])
    assert "1970-01-01" in listed.output and "last used" in listed.output, listed.output
    with HomeLock.for_cli_run(get_settings().ensure_dirs().home):  # a `lorastudio train` meanwhile
        busy = CliRunner().invoke(app, ["cache", "prune", "--max-gb", "0"])
    assert busy.exit_code == 1 and "cache not pruned" in busy.output and old.is_dir()
    pruned = CliRunner().invoke(app, ["cache", "prune", "--max-gb", str(size / GB)])
    assert pruned.exit_code == 0, pruned.output
    assert f"removed latents {OLDEST}" in pruned.output and "freed " in pruned.output
    assert not old.exists() and new.is_dir()
    refused = CliRunner().invoke(app, ["cache", "prune", "--max-gb", "-1"])
    assert refused.exit_code != 0 and new.is_dir()


def test_a_prune_during_a_run_keeps_the_entries_it_reads(
    make_config, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lorastudio.training.events import Preparing

    encodes = _counting(monkeypatch)
    root = cache_root(get_settings())
    first = _run(make_config, "first")
    own = {(s.kind, s.model) for s in cache_stats(root)}
    stale = _entry(root, OLDEST, 1_000)
    encodes.clear()
    pruned: list = []

    def emit(event: object) -> None:
        if isinstance(event, Preparing) and event.phase == "latents" and not pruned:
            pruned.append(prune_cache(root, cap=0))  # `cache prune --max-gb 0` from elsewhere

    settings = {"latent_cache": "disk", "random_flip": True, "cache_variants": 2, "steps": 3}
    second = train(make_config(output_name="second", **settings), emit, device="cpu")
    (result,) = pruned
    assert [s.model for s in result.removed] == [OLDEST] and not stale.exists()
    assert {(s.kind, s.model) for s in result.in_use} == own  # the run's text and latent entries
    assert encodes == [] and second.losses == first.losses  # read from the shards it kept


def test_two_prunes_at_once_remove_the_excess_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """RELIABILITY 352: each prune measured the cache at its start, so a second prune begun while a
    first removed entries (a run's end beside a server start's prune, POST /api/cache/prune twice)
    removed the excess again: two prunes to 20 MB of a 40 MB cache left nothing. Here prune B
    measures the cache, then prune A runs whole, then B goes on: B removes nothing more."""
    from lorastudio.data import cache_prune

    root = tmp_path / "cache"
    models = [f"{n:x}" * 20 for n in range(1, 7)]
    for n, model in enumerate(models):
        _entry(root, model, 1_000 + n)
    size = cache_stats(root)[0].bytes
    real, calls = cache_prune.cache_stats, []

    def then_another_prune(at: Path) -> list:
        measured = real(at)
        calls.append(len(measured))
        if len(calls) == 1:  # B has measured: A prunes now
            assert len(prune_cache(root, cap=3 * size).removed) == 3
        return measured

    monkeypatch.setattr(cache_prune, "cache_stats", then_another_prune)
    second = prune_cache(root, cap=3 * size)
    assert second.removed == [] and second.after_bytes == 3 * size
    assert sorted(p.name for p in (root / "latents").iterdir()) == models[3:]


def test_a_read_only_cache_over_its_cap_says_why_nothing_was_pruned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RELIABILITY 353: a prune of a cache it may not write reported each entry "kept: a run reads
    it" (its entry lock could not be opened for writing) and exited 0."""
    import errno

    from lorastudio.data import cache_io
    from lorastudio.errors import CacheError

    root = tmp_path / "cache"
    _entry(root, OLDEST, 1_000)
    real_open = os.open

    def read_only(path, flags, *args, **kwargs):  # a read-only mount (the suite may run as root)
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(cache_io.os, "open", read_only)
    with pytest.raises(CacheError) as refused:
        prune_cache(root, cap=0)
    assert "read-only: nothing can be removed" in str(refused.value)
    assert (root / "latents" / OLDEST).is_dir()


def test_a_prune_before_the_run_reads_its_latents_keeps_them(
    make_config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RELIABILITY 354: a run held its latent entry only when its VAE had loaded, after its text
    encode (minutes for a large text encoder): a prune meanwhile (another run's end, `cache prune`)
    removed the entry it was about to read, and it encoded every image again."""
    from lorastudio.training.events import ModelLoadStarted

    encodes = _counting(monkeypatch)
    root = cache_root(get_settings())
    first = _run(make_config, "first")
    own = {(s.kind, s.model) for s in cache_stats(root)}
    encodes.clear()
    pruned: list = []

    def emit(event: object) -> None:
        if isinstance(event, ModelLoadStarted) and event.component == "vae" and not pruned:
            pruned.append(prune_cache(root, cap=0))  # after the captions, before the latents

    settings = {"latent_cache": "disk", "random_flip": True, "cache_variants": 2, "steps": 3}
    second = train(make_config(output_name="second", **settings), emit, device="cpu")
    (result,) = pruned
    assert result.removed == [] and {(s.kind, s.model) for s in result.in_use} == own
    assert encodes == [] and second.losses == first.losses


def test_only_a_vae_on_disk_is_held_before_the_run_loads_it(tmp_path: Path, tiny_model) -> None:
    """The early hold (RELIABILITY 354) takes the entry of a VAE whose files are here; a hub id
    the loader has yet to download has no content fingerprint yet: no entry is made for it."""
    from types import SimpleNamespace

    from lorastudio.data.disk_cache import component_fingerprint, component_on_disk

    folder = tiny_model("flux")
    assert component_on_disk(str(folder), "vae", None)
    assert not component_on_disk(str(tmp_path), "vae", None)  # a folder without it
    assert not component_on_disk("acme/not-downloaded", "vae", None)  # HF_HUB_OFFLINE, empty cache
    single = SimpleNamespace(
        file=str(next((folder / "vae").glob("*.safetensors"))), components=("vae",), config="acme/x"
    )
    assert component_on_disk(single, "vae", None) and not component_on_disk(single, "text_encoder", None)
    assert component_fingerprint(single, "vae", None) != component_fingerprint("acme/x", "vae", None)


def test_a_prune_removes_what_killed_writers_left(tmp_path: Path) -> None:
    """RELIABILITY 355: a shard staged by a writer killed mid-write (and an entry a killed prune
    renamed aside) stayed until a server's start: a CLI user's stayed for ever, counted nowhere."""
    from lorastudio.data.disk_cache import staging_name

    root = cache_root(get_settings())
    entry = _entry(root, OLDEST, 1_000)
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead = int(gone.stdout)  # a process that has exited
    shard = entry / "11" / f"{'11' * 32}.safetensors"
    killed = shard.with_name(f".{shard.name}.{dead}.tmp")
    killed.write_bytes(b"half a shard")
    live = staging_name(shard)  # this process's: a writer at work
    live.write_bytes(b"being written")
    aside = root / "latents" / f".{NEWEST}.removing.{dead}.0123abcd"
    (aside / "22").mkdir(parents=True)
    fresh = shard.with_name(f".{'22' * 32}.safetensors.{dead}.tmp")  # another PID namespace's, at work
    fresh.write_bytes(b"being written elsewhere")
    for old in (killed, aside):
        os.utime(old, (1_000, 1_000))  # written long ago
    result = prune_to_cap(get_settings(), max_gb=1.0)
    assert result.removed == [] and not killed.exists() and not aside.exists()
    assert live.exists() and fresh.exists() and shard.exists()


def test_a_clear_during_a_prune_says_a_prune_holds_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RELIABILITY 359: a clear (`cache clear`, DELETE /api/cache) while a prune ran (a server's
    start, another home's run end) was refused as "a training run reads it ... the run of pid N",
    N being the pruning process (a prune holds the readers lock shared, as a run does)."""
    from lorastudio.data import cache_prune
    from lorastudio.data.disk_cache import clear_cache
    from lorastudio.errors import CacheError

    root = tmp_path / "cache"
    _entry(root, OLDEST, 1_000)
    _entry(root, NEWEST, 2_000)
    real, refused = cache_prune.entry_unused, []

    def clear_meanwhile(*args):
        with pytest.raises(CacheError) as err:
            clear_cache(root)
        refused.append(str(err.value))
        return real(*args)

    monkeypatch.setattr(cache_prune, "entry_unused", clear_meanwhile)
    assert [s.model for s in prune_cache(root, cap=0).removed] == [OLDEST, NEWEST]
    assert "a prune of it is under way" in refused[0] and f"pid {os.getpid()}" in refused[0]
    assert "a training run reads it" not in refused[0]
