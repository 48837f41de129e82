"""Checkpoints on the tiny FLUX.1 model: every save_every steps and on stop-and-save, complete
and atomic, keep_last retained, and what stop-and-discard / a failure leave behind."""

from __future__ import annotations

import errno
import json
import resource
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from lorastudio.errors import WRITE_ADVICE, ConfigError, NotFound, WriteFailed
from lorastudio.lora.snapshots import list_lora_snapshots
from lorastudio.settings import get_settings
from lorastudio.training.events import StopRequest
from lorastudio.training.loop import train
from lorastudio.training.resume import snapshot
from lorastudio.training.resume.checkpoint import (
    CHECKPOINT_FILES,
    find_checkpoint,
    list_checkpoints,
    write_checkpoint_folder,
)
from lorastudio.training.resume.identity import IDENTITY_FORMAT


def _stop_at(step: int, save: bool) -> tuple[list, object]:
    events: list = []

    def check() -> StopRequest | None:
        done = [e for e in events if e.type == "progress"]
        return StopRequest(save=save) if done and done[-1].step >= step else None

    return events, check


def _steps(run_dir: Path) -> list[int]:
    return [int(p.name.removeprefix("step-")) for p in list_checkpoints(run_dir)]


def _snapshots(run_dir: Path) -> list[int]:
    return [step for step, _ in list_lora_snapshots(run_dir)]


def _everything(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_a_checkpoint_every_save_every_steps_keeping_the_last(make_config):
    result = train(make_config(steps=7, save_every=2, keep_last=2), [].append, device="cpu")
    run_dir = get_settings().outputs_dir / "run"
    assert _steps(run_dir) == [4, 6]  # 2 was removed by keep_last; none at the final step 7
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step-000004", "step-000006"]
    checkpoint = run_dir / "checkpoints" / "step-000006"
    assert sorted(p.name for p in checkpoint.iterdir()) == sorted(CHECKPOINT_FILES)
    info = json.loads((checkpoint / "identity.json").read_text())
    assert info["format"] == IDENTITY_FORMAT and info["step"] == 6 and info["total_steps"] == 7
    assert info["identity"]["family"] == "flux" and info["identity"]["lora_rank"] == 4
    assert "save_every" not in info["identity"] and info["config"]["save_every"] == 2
    state = torch.load(checkpoint / "state.pt", weights_only=True)
    assert state["step"] == 6 and state["losses"] == result.losses[:6]
    assert set(state["rng"]) == {"python", "numpy", "torch_cpu", "cuda", "run_numpy", "run_torch"}
    assert state["optimizer"]["state"] and state["sampler"] == {"epoch": 3, "position": 0}
    lora = load_file(str(checkpoint / "lora.safetensors"))
    final = load_file(str(result.lora_path))
    assert len(lora) == len(final) and all(t.dtype == torch.float32 for t in lora.values())


def test_keep_last_one_and_stop_and_save_writes_a_checkpoint(make_config):
    events, stop = _stop_at(5, save=True)
    result = train(make_config(steps=9, save_every=2, keep_last=1), events.append, stop, device="cpu")
    run_dir = get_settings().outputs_dir / "run"
    assert result.stopped and result.steps_run == 5 and _steps(run_dir) == [5]
    assert result.lora_path is not None and result.lora_path.is_file()
    assert not [p for p in (run_dir / "checkpoints").iterdir() if p.name.startswith(".")]


def test_stop_and_discard_of_a_fresh_run_removes_everything(make_config):
    events, stop = _stop_at(3, save=False)
    train(make_config(steps=6, save_every=1), events.append, stop, device="cpu")
    assert not (get_settings().outputs_dir / "run").exists()


def test_a_discarded_resume_keeps_what_existed_before_it(make_config):
    """keep_last and keep_loras apply to a resumed session's own checkpoints and LoRA snapshots
    until it ends well (session 36: keep_loras removed the snapshot the resume found, and a stop
    without save then left the folder without it)."""
    cfg = make_config(steps=8, save_every=1, keep_last=2, keep_loras=1)
    events, stop = _stop_at(2, save=True)
    train(cfg, events.append, stop, device="cpu")
    run_dir = get_settings().outputs_dir / "run"
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    assert _steps(run_dir) == [1, 2] and _snapshots(run_dir) == [2]
    events, stop = _stop_at(6, save=False)
    train(cfg, events.append, stop, device="cpu", resume=run_dir)
    assert [e.step for e in events if e.type == "progress"] == [3, 4, 5, 6]
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before
    events, stop = _stop_at(4, save=True)
    train(cfg, events.append, stop, device="cpu", resume=run_dir)
    assert _steps(run_dir) == [3, 4] and _snapshots(run_dir) == [4]  # one that ended well: to all


def test_find_checkpoint(make_config, tmp_path):
    events, stop = _stop_at(1, save=True)
    train(make_config(steps=3), events.append, stop, device="cpu")
    run_dir = get_settings().outputs_dir / "run"
    checkpoint = run_dir / "checkpoints" / "step-000001"
    assert find_checkpoint(run_dir) == checkpoint == find_checkpoint(checkpoint)
    (checkpoint / "state.pt").unlink()
    with pytest.raises(NotFound, match="not a complete checkpoint"):
        find_checkpoint(checkpoint)
    with pytest.raises(NotFound, match="no checkpoint"):
        find_checkpoint(run_dir)  # an incomplete folder is not listed
    with pytest.raises(NotFound, match="no run folder"):
        find_checkpoint(tmp_path / "missing")


def test_a_failed_write_leaves_nothing(tmp_path):
    def half_written(folder: Path) -> None:
        (folder / "identity.json").write_text("{}")

    with pytest.raises(OSError, match="without state.pt, lora.safetensors"):
        write_checkpoint_folder(tmp_path, 3, half_written)
    assert _everything(tmp_path) == ["checkpoints"]

    def failing(folder: Path) -> None:
        (folder / "lora.safetensors").write_bytes(b"x")
        raise ValueError("disk full")

    with pytest.raises(ValueError, match="disk full"):
        write_checkpoint_folder(tmp_path, 3, failing)
    assert _everything(tmp_path) == ["checkpoints"]


def test_a_corrupt_checkpoint_is_refused_clearly(make_config):
    events, stop = _stop_at(1, save=True)
    train(make_config(steps=3), events.append, stop, device="cpu")
    run_dir = get_settings().outputs_dir / "run"
    checkpoint = find_checkpoint(run_dir)
    (checkpoint / "state.pt").write_bytes(b"not a torch file")
    with pytest.raises(ConfigError, match="cannot read checkpoint"):
        train(make_config(steps=3), [].append, device="cpu", resume=run_dir)
    assert checkpoint.is_dir() and (run_dir / "run.safetensors").is_file()  # a failed resume keeps them
    (checkpoint / "identity.json").write_text("[]")
    with pytest.raises(ConfigError, match="not a lorastudio.run-identity/1"):
        train(make_config(steps=3), [].append, device="cpu", resume=run_dir)


@pytest.mark.parametrize("poison", ["nan", "int"])
def test_a_checkpoint_with_nan_or_integer_lora_weights_is_refused(make_config, poison):
    """A checkpoint's LoRA weights of the right shapes but NaN (or an integer dtype) would be
    copied in and trained on as NaN (cast silently): the resume is refused naming the tensor."""
    from safetensors.torch import save_file

    events, stop = _stop_at(1, save=True)
    train(make_config(steps=3), events.append, stop, device="cpu")
    run_dir = get_settings().outputs_dir / "run"
    checkpoint = find_checkpoint(run_dir)
    weights = load_file(str(checkpoint / "lora.safetensors"))
    name = sorted(weights)[0]
    if poison == "nan":
        weights[name] = weights[name].clone()
        weights[name].view(-1)[0] = float("nan")
    else:
        weights[name] = weights[name].to(torch.int32)
    save_file(weights, str(checkpoint / "lora.safetensors"))
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    with pytest.raises(ConfigError, match=f"{name} is not a finite float tensor"):
        train(make_config(steps=3), [].append, device="cpu", resume=run_dir)
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_the_next_session_removes_a_killed_lora_export_or_snapshot_staging(tmp_path):
    """A session starting in a run folder (a resume after a kill) removes the staging folders of
    LoRA writes the kill cut short (final save, loras/ snapshot), as it does the checkpoints';
    the finished files stay."""
    from lorastudio.training.resume.checkpoint import remove_leftovers

    staged = [tmp_path / ".staging-1a2b3c4d", tmp_path / "loras" / ".staging-5e6f7a8b", tmp_path / "checkpoints" / ".staging-9c0d1e2f"]  # fmt: skip
    for folder in staged:
        folder.mkdir(parents=True)
        (folder / "half.safetensors").write_bytes(b"x" * 10)
    (tmp_path / "loras" / "run-step-000010.safetensors").write_bytes(b"lora")
    (tmp_path / "run.safetensors").write_bytes(b"lora")
    remove_leftovers(tmp_path)
    assert _everything(tmp_path) == [
        "checkpoints", "loras", "loras/run-step-000010.safetensors", "run.safetensors",
    ]  # fmt: skip


LIMIT = 1024  # bytes: below a tiny LoRA's checkpoint files, above nothing the test needs


@contextmanager
def _file_size_limit(limit: int) -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def _limited(write_folder: Callable[..., Any]) -> Callable[..., Any]:
    """`write_folder` (the checkpoint's one write) run under the file-size limit."""

    def limited(*args: Any, **kwargs: Any) -> Any:
        with _file_size_limit(LIMIT):
            return write_folder(*args, **kwargs)

    return limited


def _limit_after(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Lower the file-size limit once snapshot's `name` ran inside the checkpoint's write (its
    files before it written whole); lifted again when that write ends."""
    original: Callable[..., Any] = getattr(snapshot, name)
    write_folder = snapshot.write_checkpoint_folder
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)

    def then_limit(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, hard))
        return out

    def lifted(*args: Any, **kwargs: Any) -> Any:
        try:
            return write_folder(*args, **kwargs)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))

    monkeypatch.setattr(snapshot, name, then_limit)
    monkeypatch.setattr(snapshot, "write_checkpoint_folder", lifted)


@pytest.mark.parametrize("failing", ["lora.safetensors", "state.pt"])
def test_a_checkpoint_past_the_file_size_limit_fails_naming_it(make_config, monkeypatch, failing):
    """A checkpoint write the file system refuses is WriteFailed from the OSError it is (the errno
    and the file), not torch's or safetensors' own exception (RELIABILITY 1070): a real file-size
    limit (RLIMIT_FSIZE, `ulimit -f`; Python ignores SIGXFSZ, so write() fails with EFBIG) lowered
    around the checkpoint's own writes only, in process (no mount needed)."""
    if failing == "lora.safetensors":  # the limit from the checkpoint's start
        monkeypatch.setattr(snapshot, "write_checkpoint_folder", _limited(snapshot.write_checkpoint_folder))
    else:  # lora.safetensors written (follow_umask runs after it), then the limit: torch.save's file
        _limit_after(monkeypatch, "follow_umask")
    with pytest.raises(WriteFailed) as caught:  # was SafetensorError / torch's RuntimeError
        train(make_config(steps=2, save_every=1, output_name=f"limit-{failing[:4]}"), [].append, device="cpu")
    cause = caught.value.__cause__
    assert isinstance(cause, OSError) and cause.errno == errno.EFBIG
    assert Path(str(cause.filename)).name == failing
    assert str(caught.value).startswith("write failed: the checkpoint step-000001 could not be written")
    assert f"File too large: {cause.filename}; {WRITE_ADVICE[errno.EFBIG]}" in str(caught.value)
    checkpoints = get_settings().outputs_dir / f"limit-{failing[:4]}" / "checkpoints"
    assert not checkpoints.exists() or list(checkpoints.iterdir()) == []  # no staging, no step folder
