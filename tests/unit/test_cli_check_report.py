"""`lorastudio train --check`'s report lines: the data a run of `[[datasets]]` entries trains on,
and the wall-time forecast's phase bases said once (session 38 journey)."""

from __future__ import annotations

import io
from contextlib import redirect_stdout

from lorastudio.cli.train_check import phase_bases, print_time, settings_lines

SHARED = "a guess: this machine's time per unit of work from 1 earlier run"


def test_a_run_of_datasets_entries_names_them_not_data_dir_none() -> None:
    # a config imported from kohya (kohya_folders, one [[datasets]] entry) printed "data_dir None"
    cfg = {"family": "flux", "data_dir": None, "datasets": [{"path": "/data/img"}, {"path": "reg"}]}
    lines = settings_lines(cfg)
    assert "  datasets       /data/img, reg" in lines
    assert not any("None" in line for line in lines if "data_dir" in line or "datasets" in line)
    assert "  data_dir       my-set" in settings_lines({"data_dir": "my-set", "datasets": None})


def test_a_basis_every_phase_shares_is_said_once() -> None:
    phases = [
        {"name": "process_start", "seconds": 13.9, "basis": f"{SHARED} (the CLI's start: imports)"},
        {"name": "weights_load", "seconds": 4.7, "basis": SHARED},
        {"name": "steps", "seconds": 286.0, "basis": SHARED},
        {"name": "export", "seconds": 0.8, "basis": "the e2e run of note 23"},
        {"name": "other", "seconds": 1.1, "basis": f"{SHARED} (engine preflight)"},
    ]
    note = f"a guess (basis: {SHARED}; from the CLI's start)"
    assert phase_bases(phases, note) == [
        "the CLI's start: imports",
        "",
        "",
        "the e2e run of note 23",
        "engine preflight",
    ]
    # the first line does not say the shared basis: every phase says its own
    assert phase_bases(phases, "measured") == [p["basis"] for p in phases]
    printed = io.StringIO()
    with redirect_stdout(printed):
        print_time({"total_s": 306.5, "confidence": "guess", "note": note, "phases": phases})
    text = printed.getvalue()
    assert text.count(SHARED) == 1  # the first line's alone (it was on 5 lines)
    assert "  steps            4 min 46 s\n" in text


def test_an_added_basis_keeps_its_own_parentheses() -> None:
    # a LoKr run forecast from a LoRA run printed "(; runs of lora, not this run's lokr (factor -1)"
    # (session 39 journey4): the tail's ";" kept and its last ")" taken for the outer one
    lokr = f"{SHARED}; runs of lora, not this run's lokr (factor -1)"
    phases = [
        {"name": "weights_load", "seconds": 4.7, "basis": SHARED},
        {"name": "first_step", "seconds": 6.3, "basis": lokr},
        {"name": "steps", "seconds": 8.7, "basis": lokr},
        {"name": "export", "seconds": 0.8, "basis": SHARED},
        {"name": "checkpoints", "seconds": 0.8, "basis": SHARED},
        {"name": "other", "seconds": 1.1, "basis": f"{SHARED} (engine preflight (and gaps))"},
    ]
    words = phase_bases(phases, f"a guess (basis: {SHARED})")
    assert words[1] == words[2] == "runs of lora, not this run's lokr (factor -1)"
    assert words[5] == "engine preflight (and gaps)"
