"""The run's own scan decodes every image the checks left (RELIABILITY 165).

The checks before a run (the job service's preflight, `train --check`) fully decode at most
decoded.FULL_DECODE_BUDGET_S of images they have not seen; the run's preflight decodes all the
rest before any model loads. Here the checks' budget is spent (0 s): a PNG whose deflate stream
ends cleanly before its last row (Pillow decodes it with those rows black, saying nothing)
passes the check and fails the run before its models load, naming the file; with every file
good, the run records them and the next check decodes none.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio.config import TrainConfig
from lorastudio.data import decoded
from lorastudio.errors import DatasetError
from lorastudio.settings import get_settings
from lorastudio.training.events import Error
from lorastudio.training.loop import train
from undecodable_images import idat_ends_early, record_full_decodes, train_check_output


@pytest.fixture
def full_decodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the files whose every pixel the process decodes (images._full_decode)."""
    return record_full_decodes(monkeypatch)


def _dataset(small_dataset: Path, tmp_path: Path, bad: bool) -> Path:
    data = tmp_path / "copied"
    shutil.copytree(small_dataset, data)  # copied in by hand: no check has seen it
    if bad:
        (data / "zz_short.png").write_bytes(idat_ends_early(32))
        (data / "zz_short.txt").write_text("rows missing")
    return data


def test_a_png_the_checks_left_fails_the_run_before_its_models_load(
    small_dataset: Path,
    tmp_path: Path,
    run_settings: Callable[..., dict],
    tiny_model: Callable[[str], Path],
    full_decodes: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(decoded, "FULL_DECODE_BUDGET_S", 0.0)  # the checks' budget spent
    raw = run_settings("flux", tiny_model("flux"), _dataset(small_dataset, tmp_path, bad=True), {})
    out = train_check_output(raw, tmp_path)  # the cheap check passes it, and says the run decodes it
    assert full_decodes == []
    assert "5 image(s) not fully decoded yet" in out and "the run decodes these before its models load" in out
    events: list = []
    with pytest.raises(DatasetError) as info:
        train(TrainConfig.model_validate(raw), events.append, device="cpu")
    assert any(p.startswith("zz_short.png: corrupt (PNG pixel data cut short") for p in info.value.problems)
    assert "zz_short.png" in full_decodes
    assert not any(e.type == "model_load_started" for e in events)  # before any model loads
    assert [type(e) for e in events if e.type in ("error", "complete")] == [Error]
    assert not (get_settings().outputs_dir / "run").exists()


def test_the_runs_scan_records_what_it_decoded_for_the_nexttrain_check_output(
    small_dataset: Path,
    tmp_path: Path,
    run_settings: Callable[..., dict],
    tiny_model: Callable[[str], Path],
    full_decodes: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = _dataset(small_dataset, tmp_path, bad=False)
    raw = run_settings("flux", tiny_model("flux"), data, {})
    monkeypatch.setattr(decoded, "FULL_DECODE_BUDGET_S", 0.0)
    assert "4 image(s) not fully decoded yet" in train_check_output(raw, tmp_path)
    assert full_decodes == []
    train(TrainConfig.model_validate(raw), [].append, device="cpu")
    assert sorted(full_decodes) == sorted(p.name for p in data.glob("*.png"))  # each once, by the run
    full_decodes.clear()
    monkeypatch.setattr(decoded, "FULL_DECODE_BUDGET_S", 30.0)
    out = train_check_output({**raw, "output_name": "again"}, tmp_path)
    assert full_decodes == []  # recorded by the run: the next check decodes none
    assert "not fully decoded" not in out
