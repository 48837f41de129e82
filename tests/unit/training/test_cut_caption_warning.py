"""Captions cut at max_sequence_length are one of the run's dataset warnings (session 30,
RELIABILITY 863): the note naming them reached neither the run's log, the CLI's stderr (only
inside the plan line's fallbacks) nor the run record's `dataset_warnings`; now each once, and
the CLI prints every dataset warning in its `warning:` style (fix 787 printed them bare)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from cli_runner import run_cli_streams
from lorastudio.jobs.store import RunStore
from lorastudio.settings import get_settings

LONG = "a very long caption with many many words about a red circle on a blue background at dusk"


def test_a_cut_caption_is_a_dataset_warning_of_the_log_the_cli_and_the_record(
    tiny_model, sample_dataset: Path, tmp_path: Path, run_settings, capsys, monkeypatch, caplog
) -> None:
    data = tmp_path / "data"
    shutil.copytree(sample_dataset, data)
    (data / "shape_00.txt").write_text(LONG + "\n")
    over = {"steps": 1, "resolution": 32, "max_sequence_length": 8, "output_name": "cut", "batch_size": 1}
    config = tmp_path / "run.json"
    config.write_text(json.dumps(run_settings("flux", tiny_model("flux"), data, over)))
    caplog.set_level(logging.WARNING, logger="lorastudio")
    code, _, err = run_cli_streams(capsys, monkeypatch, "train", str(config), "--device", "cpu")
    assert code == 0, err
    lines = err.splitlines()
    cut = [line for line in lines if "longer than the 8 tokens FLUX.1's text encoder reads" in line]
    assert len(cut) == 1 and cut[0].startswith("warning: captions: 1 of 8 "), lines  # not in the plan line
    crop = [line for line in lines if "to the crop of their bucket" in line]
    assert len(crop) == 1 and crop[0].startswith("warning: 2 image(s) lose more than 25%"), lines
    logged = [r.getMessage() for r in caplog.records if "text encoder reads" in r.getMessage()]
    assert [f"warning: {m}" for m in logged] == cut  # the run's log: one record (a server run's file)
    store = RunStore.open(get_settings().db_path, recover=False)
    try:
        run = store.get_run(store.list_runs()[0]["id"])
    finally:
        store.close()
    said = run["dataset_warnings"]
    assert [w for w in said if "text encoder reads" in w] == logged
    assert [w for w in said if "to the crop of their bucket" in w] == [crop[0].removeprefix("warning: ")]
    assert run["warnings"] == []
    # `runs show` names them too (RELIABILITY 913: its text left the record's dataset warnings out)
    code, out, _ = run_cli_streams(capsys, monkeypatch, "runs", "show", run["id"])
    assert code == 0
    assert [line for line in out.splitlines() if line.startswith("dataset ")] == [
        f"{'dataset':12} {w}" for w in said
    ]
    code, out, _ = run_cli_streams(capsys, monkeypatch, "runs", "show", run["id"], "--json")
    assert code == 0 and json.loads(out)["dataset_warnings"] == said  # stdout stays one JSON document


@pytest.mark.parametrize("rank", [0, 1])
def test_the_clis_warning_lines_name_a_rank_other_than_0(rank: int, capsys) -> None:
    from lorastudio.cli.run_display import WarningLines

    with WarningLines(rank):
        logging.getLogger("lorastudio.data").warning("%d image(s) upscaled", 2)
    logging.getLogger("lorastudio.data").warning("after: not ours")
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        "warning: 2 image(s) upscaled" if rank == 0 else "warning (rank 1): 2 image(s) upscaled"
    )
    assert "warning:" not in "".join(err[1:])


def test_five_thousand_cut_captions_of_two_lines_are_one_line_of_the_note() -> None:
    """RELIABILITY 917: a caption file of two lines is one caption with its line break, which the
    note quoted as it was, so the note (a log line, the CLI's `warning:` line, the record's list)
    broke over lines; 5,000 of them are still one note naming three."""
    from lorastudio import families
    from lorastudio.config import TrainConfig
    from lorastudio.training.inputs.caption_length import cut_note

    captions = [f"caption {i} of a red circle\r\non a blue background" for i in range(5000)]
    cfg = TrainConfig.model_construct(max_sequence_length=8)
    note = cut_note(families.get("flux").spec, cfg, captions, dict.fromkeys(captions, 30))
    assert note is not None and note.startswith("captions: 5000 of 5000 are longer than the 8 tokens")
    assert "\n" not in note and "\r" not in note, note
    assert '"caption 0 of a red circle\\non a blue background" (30 tokens)' in note
    assert "and 4997 more" in note and len(note) < 600
