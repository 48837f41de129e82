"""A models/ folder holding damaged entries: the catalogue lists every other model and gives each
damaged one a reason, in bounded time. The JSON files of a model folder are read without blocking
(a FIFO), only when regular (a link to /dev/zero is none), bounded, and parsed with their
nesting caught (basemodels/jsonfile.py); a checkpoint's header likewise (lora/header.py)."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from lorastudio.basemodels import list_models
from lorastudio.basemodels.catalogue import ModelEntry
from lorastudio.errors import ModelSourceError
from lorastudio.lora.header import read_header
from lorastudio.settings import Settings

HANG_S = 60  # far past what a listing of a dozen entries takes even on a loaded host


@contextmanager
def _unblocking(*fifos: Path) -> Iterator[None]:
    """After the block, open each FIFO for writing and close it, so that a reader the old code
    left blocked in open() is released (the test then fails instead of hanging the suite)."""
    try:
        yield
    finally:
        for fifo in fifos:
            with contextlib.suppress(OSError):  # no reader waiting
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def _listing(settings: Settings) -> list[ModelEntry]:
    """list_models in a thread, failing (not hanging) when it does not end."""
    done: dict[str, object] = {}

    def run() -> None:
        try:
            done["entries"] = list_models(settings, hub_cache=False, known_captioners=False)
        except Exception as err:  # noqa: BLE001 (reported by the assertion below)
            done["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG_S)
    assert not thread.is_alive(), "the catalogue listing blocked on a damaged entry"
    assert "error" not in done, f"the listing raised {done.get('error')!r}"
    return done["entries"]  # type: ignore[return-value]


def test_damaged_json_files_cost_their_entry_only(settings: Settings, copy_tiny: Callable[..., Path]) -> None:
    models = settings.models_dir
    copy_tiny("flux", models / "good")
    fifo_marker = copy_tiny("flux", models / "fifo-marker")
    os.mkfifo(fifo_marker / "lorastudio_fetch.json")
    zero_marker = copy_tiny("flux", models / "zero-marker")
    os.symlink("/dev/zero", zero_marker / "lorastudio_fetch.json")
    deep = copy_tiny("flux", models / "deep-index")
    (deep / "model_index.json").write_text("[" * 200_000, encoding="utf-8")
    deep_shards = copy_tiny("flux", models / "deep-shards")
    (deep_shards / "vae" / "diffusion_pytorch_model.safetensors.index.json").write_text("{" * 200_000)
    fifo_config = models / "fifo-config"
    fifo_config.mkdir()
    os.mkfifo(fifo_config / "config.json")
    (fifo_config / "model.safetensors").write_bytes(b"\0" * 8)
    with _unblocking(
        fifo_marker / "lorastudio_fetch.json",
        fifo_config / "config.json",
    ):
        entries = {e.id: e for e in _listing(settings)}
    assert sorted(entries) == [
        "deep-index",
        "deep-shards",
        "fifo-config",
        "fifo-marker",
        "good",
        "zero-marker",
    ]
    assert entries["good"].trainable and entries["good"].family == "flux"
    for name in ("fifo-marker", "zero-marker"):  # no readable marker: the user's folder, not lorastudio's
        assert (entries[name].trainable, entries[name].deletable) == (True, False)
    assert not entries["deep-index"].trainable and "nests arrays or objects deeper" in str(
        entries["deep-index"].reason
    )
    shards = entries["deep-shards"]
    assert not shards.trainable and shards.missing == [
        "vae/diffusion_pytorch_model.safetensors.index.json (unreadable)"
    ]
    assert not entries["fifo-config"].trainable and entries["fifo-config"].kind == "pipeline"


def test_a_checkpoint_header_that_is_no_regular_file_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.safetensors"
    os.mkfifo(fifo)
    with _unblocking(fifo):
        done: dict[str, object] = {}

        def read() -> None:
            try:
                read_header(fifo)
            except ModelSourceError as err:
                done["error"] = str(err)

        thread = threading.Thread(target=read, daemon=True)
        thread.start()
        thread.join(HANG_S)
        assert not thread.is_alive(), "reading a FIFO's header blocked"
    assert "not a regular file" in str(done.get("error"))
    with pytest.raises(ModelSourceError, match="it is a folder"):
        read_header(tmp_path)


def test_a_weight_index_of_lists_is_an_unreadable_index(settings: Settings, tmp_path: Path) -> None:
    from lorastudio.basemodels.captioners import weight_problems

    folder = tmp_path / "captioner"
    folder.mkdir()
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": ["x"]}}))
    assert weight_problems(folder) == []  # no shard named: nothing is missing (was a TypeError)


def test_concurrent_deletes_of_one_model_delete_it_once(
    settings: Settings, copy_tiny: Callable[..., Path]
) -> None:
    """Six deletes of one model at once (double clicks, two tabs): one deletes it, the others are
    NotFound. (The others' rename raised FileNotFoundError, a 500, or their listing caught the
    folder half-renamed and called it the user's own: a 403 "remove it yourself".)"""
    from lorastudio.basemodels import delete_model
    from lorastudio.errors import NotFound

    def delete(outcomes: list[str], barrier: threading.Barrier) -> None:
        barrier.wait()
        try:
            delete_model(settings, "tiny")
            outcomes.append("deleted")
        except NotFound:
            outcomes.append("not found")
        except Exception as err:  # noqa: BLE001 (reported by the assertion below)
            outcomes.append(f"{type(err).__name__}: {err}")

    for _ in range(3):
        copy_tiny("flux", settings.models_dir / "tiny", marker=True)
        outcomes: list[str] = []
        barrier = threading.Barrier(6)
        threads = [threading.Thread(target=delete, args=(outcomes, barrier)) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(HANG_S)
        assert sorted(outcomes) == ["deleted"] + ["not found"] * 5, outcomes
        assert list(settings.models_dir.iterdir()) == []
