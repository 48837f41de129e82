"""Attacks on the on-disk encode cache's shards (data/cache_io.py, training/inputs/latents_disk.py):
shards planted or damaged in <cache>/latents and <cache>/text are re-encoded (never read, never
followed out of the cache, never a hang), and a link or a file where a run's cache folder goes
refuses the run naming it."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from multiprocessing.connection import Connection
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from lorastudio.data import cache_io
from lorastudio.data.cache_io import prepare_cache_folder
from lorastudio.data.disk_cache import cache_root, shard_path
from lorastudio.errors import CacheError
from lorastudio.settings import get_settings
from lorastudio.training.inputs.latents_disk import _crc, read_shard, write_shard
from lorastudio.training.loop import train

MODEL, KEY = "f" * 20, "ab" * 32
SHAPE = (4, 2, 2)


def _valid(**over: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"mean": torch.zeros(SHAPE), "std": torch.ones(SHAPE), **over}


def _plant(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    """A whole shard with a valid crc32 (what a damaged writer or a hand could leave)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata={"crc32": _crc(tensors)})


@pytest.mark.parametrize(
    "tensors",
    [
        _valid(std=torch.ones(1)),  # broadcast silently into every latent
        _valid(mean=torch.zeros(SHAPE, dtype=torch.int64)),
        _valid(std=torch.ones(SHAPE, dtype=torch.float16)),
        _valid(mean=torch.full(SHAPE, float("nan"))),
        _valid(std=torch.full(SHAPE, float("inf"))),
    ],
    ids=["std-shape", "int-mean", "fp16-std", "nan-mean", "inf-std"],
)
def test_a_latent_shard_of_another_shape_dtype_or_non_finite_is_not_read(tmp_path: Path, tensors) -> None:
    path = shard_path(tmp_path, "latents", MODEL, KEY)
    _plant(path, _valid())
    assert read_shard(path, SHAPE) is not None
    _plant(path, tensors)
    assert read_shard(path, SHAPE) is None


def test_an_empty_text_shard_is_not_read(tmp_path: Path) -> None:
    path = shard_path(tmp_path, "text", MODEL, KEY)
    _plant(path, {})
    assert read_shard(path, required=()) is None


def test_links_folders_and_big_files_at_a_shard_are_not_read(tmp_path: Path, monkeypatch) -> None:
    root, outside = tmp_path / "cache", tmp_path / "outside"
    path = shard_path(root, "latents", MODEL, KEY)
    _plant(outside / "shard.safetensors", _valid())
    path.parent.mkdir(parents=True)
    path.symlink_to(outside / "shard.safetensors")  # a link to a valid shard elsewhere
    assert read_shard(path, SHAPE) is None
    path.unlink()
    path.mkdir()  # a folder where the file goes
    assert read_shard(path, SHAPE) is None and not write_shard(path, _valid())
    path.rmdir()
    _plant(path, _valid())
    monkeypatch.setattr(cache_io, "MAX_SHARD_BYTES", 64)
    assert read_shard(path, SHAPE) is None  # larger than the cap: not read into RAM


def test_a_linked_prefix_folder_is_neither_read_nor_written_through(tmp_path: Path) -> None:
    root, outside = tmp_path / "cache", tmp_path / "outside"
    path = shard_path(root, "latents", MODEL, KEY)
    outside.mkdir()
    _plant(outside / path.name, _valid())
    path.parent.parent.mkdir(parents=True)
    path.parent.symlink_to(outside, target_is_directory=True)  # latents/<model>/ab -> outside
    assert read_shard(path, SHAPE) is None
    before = (outside / path.name).read_bytes()
    assert not write_shard(path, _valid(mean=torch.ones(SHAPE)))
    assert (outside / path.name).read_bytes() == before and sorted(os.listdir(outside)) == [path.name]


def _read_shard_into(path: str, answer: Connection) -> None:
    answer.send(repr(read_shard(Path(path))))


def test_a_fifo_at_a_shard_does_not_block_the_reader(tmp_path: Path) -> None:
    """In a child process (forked from this one, its imports done): the old reader blocked in
    open() holding the GIL (a hung run)."""
    path = shard_path(tmp_path, "latents", MODEL, KEY)
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    answer, sender = multiprocessing.Pipe(duplex=False)
    child = multiprocessing.get_context("fork").Process(target=_read_shard_into, args=(str(path), sender))
    child.start()
    try:
        child.join(60)
        blocked = child.is_alive()
    finally:
        if child.is_alive():
            child.kill()
            child.join()
    if blocked:
        pytest.fail("reading a FIFO planted at a shard blocked")
    assert child.exitcode == 0 and answer.poll(5) and answer.recv() == "None", child.exitcode


@pytest.mark.parametrize("plant", ["file", "link"])
def test_a_file_or_link_where_the_cache_folder_goes_refuses_the_run(tmp_path: Path, plant: str) -> None:
    root = tmp_path / "cache"
    root.mkdir()
    if plant == "file":
        (root / "latents").write_text("not a folder")
    else:
        (tmp_path / "elsewhere").mkdir()
        (root / "latents").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(CacheError) as err:
        prepare_cache_folder(root, "latents", MODEL)
    assert str(root / "latents" / MODEL) in err.value.problems[0]
    assert list((tmp_path / "elsewhere").iterdir()) == [] if plant == "link" else True
    assert prepare_cache_folder(root, "text", MODEL).is_dir()


def test_a_run_with_planted_prefix_links_trains_and_writes_nothing_outside(
    make_config, tmp_path: Path
) -> None:
    """Every 2-hex prefix folder of the run's latents is a link out of the cache: the run
    encodes, keeps the shards in RAM, trains like a memory-cached run and leaves the target
    untouched."""
    settings = {"random_crop": True, "random_flip": True, "cache_variants": 2, "steps": 3}
    first = train(make_config(output_name="mem", latent_cache="memory", **settings), [].append, device="cpu")
    root = cache_root(get_settings())
    outside = tmp_path / "outside"
    outside.mkdir()
    train(make_config(output_name="probe", latent_cache="disk", **settings), [].append, device="cpu")
    for model in (root / "latents").iterdir():
        for prefix in [p for p in model.iterdir() if p.is_dir()]:  # not the entry's lock (.used)
            for shard in prefix.iterdir():
                shard.unlink()
            prefix.rmdir()
            prefix.symlink_to(outside, target_is_directory=True)
    planted = train(
        make_config(output_name="planted", latent_cache="disk", **settings), [].append, device="cpu"
    )
    assert planted.losses == first.losses and list(outside.iterdir()) == []


def test_a_clear_while_a_disk_cached_run_reads_is_refused_then_allowed(make_config) -> None:
    """The run holds the cache's readers lock from its captions' encode to its end: a clear
    meanwhile (from this process, another one or another home sharing the folder) is a
    CacheError naming the run's pid, not shards vanishing under the run; after it, a clear frees them."""
    from lorastudio.data.disk_cache import clear_cache
    from lorastudio.training.events import Preparing

    root = cache_root(get_settings())
    refusals: list[str] = []

    def emit(event: object) -> None:
        if isinstance(event, Preparing) and event.phase == "latents" and not refusals:
            with pytest.raises(CacheError) as err:
                clear_cache(root)
            refusals.append(str(err.value))

    settings = {"random_crop": True, "random_flip": True, "cache_variants": 2, "steps": 2}
    train(make_config(output_name="read", latent_cache="disk", **settings), emit, device="cpu")
    assert refusals and f"pid {os.getpid()}" in refusals[0]
    assert clear_cache(root) > 0


@pytest.mark.parametrize("where", ["cache", "parent"])
def test_a_file_at_the_cache_folder_is_named_not_its_lock(tmp_path: Path, where: str) -> None:
    """RELIABILITY 356: LORASTUDIO_CACHE_DIR on a file (or below one) refused the run naming
    "<cache>/.readers.lock: File exists (remove what is there)", a path that is not there."""
    from lorastudio.data.cache_io import READERS_LOCK, hold_readers

    planted = tmp_path / "cache"
    planted.write_text("not a folder")
    root = planted if where == "cache" else planted / "below"
    with pytest.raises(CacheError) as err:
        hold_readers(root)
    (problem,) = err.value.problems
    assert problem.startswith(f"{root}: ") and READERS_LOCK not in problem
    assert "LORASTUDIO_CACHE_DIR" in problem and planted.read_text() == "not a folder"


def _hub_repo(cache: Path, name: str, ref: str | None) -> Path:
    """A hub-cache repo with a VAE (config.json, one weight file) in snapshot "a"*40; its
    refs/main holds `ref` (None: made by the caller)."""
    storage = cache / f"models--{name.replace('/', '--')}"
    vae = storage / "snapshots" / ("a" * 40) / "vae"
    vae.mkdir(parents=True)
    (vae / "config.json").write_text("{}")
    (vae / "diffusion_pytorch_model.safetensors").write_bytes(b"weights")
    (storage / "refs").mkdir()
    if ref is not None:
        (storage / "refs" / "main").write_text(ref)
    return storage


def test_a_hostile_hub_ref_is_not_read_for_a_fingerprint(tmp_path: Path) -> None:
    """RELIABILITY 357: the encode cache's fingerprint of a hub base (the preflight's, a run's, the
    identity's) found its snapshot with huggingface_hub's try_to_load_from_cache, which reads a
    ref whole: a sparse terabyte at refs/main read until the out-of-memory kill (the server's
    job preflight too). Run in a child capped by RLIMIT_AS: the old code's read is a MemoryError."""
    cache = tmp_path / "hub"
    good = _hub_repo(cache, "ok/good", "a" * 40)
    with open(_hub_repo(cache, "bad/huge", None) / "refs" / "main", "wb") as fh:
        fh.truncate(1 << 40)  # sparse: no disk
    (_hub_repo(cache, "bad/zero", None) / "refs" / "main").symlink_to("/dev/zero")
    os.mkfifo(_hub_repo(cache, "bad/fifo", None) / "refs" / "main")
    code = (
        "import resource, json; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30));"
        "from lorastudio.data.disk_cache import component_fingerprint as fp, component_on_disk as here;"
        "repos = ['ok/good', 'bad/huge', 'bad/zero', 'bad/fifo'];"
        "print(json.dumps({r: [fp(r, 'vae', None), here(r, 'vae', None)] for r in repos}))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "HF_HUB_CACHE": str(cache)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout)
    assert found["ok/good"][1] and not any(found[r][1] for r in ("bad/huge", "bad/zero", "bad/fifo"))
    assert len({found[r][0] for r in found}) == 4  # each its own (the bad ones by their hub id)
    (good / "snapshots" / ("a" * 40) / "vae" / "diffusion_pytorch_model.safetensors").write_bytes(b"other")
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert json.loads(again.stdout)["ok/good"][0] != found["ok/good"][0]  # by the snapshot's files


def test_a_clear_holds_runs_back_for_its_renames_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RELIABILITY 360: a clear removed each entry while it held the readers lock exclusively, so
    a run starting during the clear of a large cache (minutes of removals) waited in silence for
    all of it; the entries are renamed aside first, so the removal needs no lock."""
    import fcntl

    from lorastudio.data import disk_cache
    from lorastudio.data.cache_io import READERS_LOCK

    root = tmp_path / "cache"
    for model in ("a" * 20, "b" * 20):
        _plant(shard_path(root, "latents", model, "c" * 64), _valid())
    real, blocked = disk_cache.shutil.rmtree, []

    def removing(path, *args, **kwargs):  # while the clear removes: may a run take the lock?
        fd = os.open(root / READERS_LOCK, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            blocked.append(False)
        except BlockingIOError:
            blocked.append(True)
        finally:
            os.close(fd)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(disk_cache.shutil, "rmtree", removing)
    assert disk_cache.clear_cache(root) > 0
    assert blocked == [False, False] and disk_cache.cache_stats(root) == []
    assert [p.name for p in (root / "latents").iterdir()] == []  # nothing left aside
