"""A checkpoint write that the file system refuses is WriteFailed from the OSError it is (the
errno and the file), not torch's or safetensors' own exception (RELIABILITY 1070): a real
file-size limit (RLIMIT_FSIZE, `ulimit -f`; Python ignores SIGXFSZ, so write() fails with EFBIG)
lowered around the checkpoint's own writes only, in process (no mount needed)."""

from __future__ import annotations

import errno
import resource
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from lorastudio.errors import WRITE_ADVICE, WriteFailed
from lorastudio.settings import get_settings
from lorastudio.training import snapshot
from lorastudio.training.loop import train

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
def test_a_checkpoint_past_the_file_size_limit_fails_with_its_oserror(make_config, monkeypatch, failing):
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
