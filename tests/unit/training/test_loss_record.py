"""A run's per-step losses beside it (training/resume/loss_record.py, RELIABILITY 1340): a checkpoint's
state.pt keeps a bounded window and names the rest in the run folder's losses.bin, an exact
resume still gives the uninterrupted run's losses, and an older version's checkpoint (every loss
in state.pt) still resumes."""

from __future__ import annotations

import math
import os
import shutil
import struct
import threading

import pytest
import torch

from lorastudio.errors import ConfigError
from lorastudio.settings import get_settings
from lorastudio.training.loop import train
from lorastudio.training.resume import loss_record
from lorastudio.training.resume.loss_record import RECORD_KEY, LossRecord
from lorastudio.training.resume.losses_file import losses_file_problem
from lorastudio.training.resume.run_files import LOSSES_FILE
from read_only import read_only
from stop_at import stop_at


def _state(run_dir, step: int) -> dict:
    return torch.load(run_dir / "checkpoints" / f"step-{step:06d}" / "state.pt", weights_only=True)


def test_a_checkpoint_keeps_a_window_and_a_resume_reads_the_rest_beside_the_run(make_config, monkeypatch):
    monkeypatch.setattr(loss_record, "WINDOW", 2)
    full = train(make_config(steps=5, output_name="full"), [].append, device="cpu")
    events, stop = stop_at(3)
    part = make_config(steps=5, output_name="part", save_every=2, keep_last=5)
    train(part, events.append, stop, device="cpu")  # checkpoints 2 and 3 (the stop's)
    run_dir = get_settings().outputs_dir / "part"
    state = _state(run_dir, 3)
    assert state["losses"] == full.losses[1:3]  # the window only: was every loss so far
    assert state[RECORD_KEY]["count"] == 3 and (run_dir / LOSSES_FILE).stat().st_size == 3 * 8
    # from the older checkpoint while checkpoint 3 stays: its session's checkpoint 4 appends
    resumed = train(part, [].append, device="cpu", resume=run_dir / "checkpoints" / "step-000002")
    assert resumed.losses == full.losses
    assert _state(run_dir, 4)[RECORD_KEY]["spans"] == [[0, 2], [24, 2]]
    kept = LossRecord()  # checkpoint 3's losses, never written over
    assert kept.restore(run_dir, 3, _state(run_dir, 3)) is None and list(kept) == full.losses[:3]


def test_an_older_versions_checkpoint_with_every_loss_still_resumes(make_config):
    full = train(make_config(steps=4, output_name="full"), [].append, device="cpu")
    events, stop = stop_at(3)
    train(make_config(steps=4, output_name="old"), events.append, stop, device="cpu")
    run_dir = get_settings().outputs_dir / "old"
    path = run_dir / "checkpoints" / "step-000003" / "state.pt"
    state = torch.load(path, weights_only=True)
    del state[RECORD_KEY]
    state["losses"] = full.losses[:3]  # as the older version wrote it
    torch.save(state, path)
    (run_dir / LOSSES_FILE).unlink()
    resumed = train(make_config(steps=4, output_name="old"), [].append, device="cpu", resume=run_dir)
    assert resumed.losses == full.losses


def test_flush_restore_discard_and_a_record_that_does_not_match(tmp_path):
    record = LossRecord()
    for loss in (0.5, 0.25):
        record.append(loss)
    first = record.flush(tmp_path)
    record.append(float("nan"))
    second = record.flush(tmp_path)  # the same span goes on
    assert first["spans"] == [[0, 2]] and second["spans"] == [[0, 3]] and second["count"] == 3
    again = LossRecord()
    assert again.restore(tmp_path, 3, {"losses": [0.25, math.nan], RECORD_KEY: second}) is None
    assert list(again)[:2] == [0.5, 0.25] and math.isnan(list(again)[2])
    again.append(0.125)
    third = again.flush(tmp_path)  # a resumed session continues where the file ends
    assert third["spans"] == [[0, 4]] and (tmp_path / LOSSES_FILE).stat().st_size == 32
    again.discard()  # a resume stopped without save: the file as that session found it
    assert (tmp_path / LOSSES_FILE).stat().st_size == 24
    (tmp_path / LOSSES_FILE).write_bytes(b"\0" * 24)  # another file's values
    lost = LossRecord()
    note = lost.restore(tmp_path, 3, {"losses": [0.25, 7.0], RECORD_KEY: second})
    assert note is not None and "steps 1-1" in note and LOSSES_FILE in note
    values = list(lost)
    assert math.isnan(values[0]) and values[1:] == [0.25, 7.0]
    # an older version's checkpoint of a run it resumed from one of ours: its list is our window only
    rolled = LossRecord()
    note = rolled.restore(tmp_path, 4, {"losses": [0.25, 7.0]})
    assert note is not None and "steps 1-2" in note and list(rolled)[2:] == [0.25, 7.0]
    with pytest.raises(ValueError, match="does not name 2 steps"):
        loss_record.read_span(tmp_path / LOSSES_FILE, second, 2)


def test_the_losses_an_older_version_left_out_are_read_back_from_losses_bin(make_config, monkeypatch):
    """RELIABILITY 1440: an older version resumed our checkpoint 3 (its window only) and wrote
    checkpoint 4 of that window and its step; our resume of it had steps 1-1 NaN, though
    losses.bin still held them (named by checkpoint 3, or at the file's start once it is gone)."""
    monkeypatch.setattr(loss_record, "WINDOW", 2)
    full = train(make_config(steps=5, output_name="full"), [].append, device="cpu")
    events, stop = stop_at(4)
    part = make_config(steps=5, output_name="part", save_every=3, keep_last=5)
    train(part, events.append, stop, device="cpu")  # checkpoints 3 and 4 (the stop's)
    run_dir = get_settings().outputs_dir / "part"
    path = run_dir / "checkpoints" / "step-000004" / "state.pt"
    state = _state(run_dir, 4)
    del state[RECORD_KEY]
    state["losses"] = full.losses[1:4]  # checkpoint 3's window and step 4, as the older version wrote it
    torch.save(state, path)
    (run_dir / LOSSES_FILE).write_bytes((run_dir / LOSSES_FILE).read_bytes()[:24])  # it never wrote there
    warnings: list = []
    resumed = train(part, warnings.append, device="cpu", resume=run_dir / "checkpoints" / "step-000004")
    assert resumed.losses == full.losses and not [e for e in warnings if e.type == "warning"]
    (run_dir / LOSSES_FILE).write_bytes(b"".join(struct.pack("<d", x) for x in full.losses[:3]))
    for step in (3, 5):
        shutil.rmtree(
            run_dir / "checkpoints" / f"step-{step:06d}", ignore_errors=True
        )  # only the older version's left
    alone = LossRecord()
    assert alone.restore(run_dir, 4, state) is None and list(alone) == full.losses[:4]
    (run_dir / LOSSES_FILE).write_bytes(b"\0" * 24)  # another run's values: not taken
    assert "steps 1-1" in (LossRecord().restore(run_dir, 4, state) or "")


def test_a_resume_within_the_window_lost_nothing_when_losses_bin_is_gone(tmp_path):
    """RELIABILITY 1541: a checkpoint of step <= WINDOW copied without losses.bin (or beside a
    damaged one) holds every loss itself; its resume warned "the losses of steps 1-0 ... NaN"."""
    record = LossRecord()
    for loss in (0.5, 0.25, 0.125):
        record.append(loss)
    entry = record.flush(tmp_path)
    (tmp_path / LOSSES_FILE).unlink()
    again = LossRecord()
    assert again.restore(tmp_path, 3, {"losses": [0.5, 0.25, 0.125], RECORD_KEY: entry}) is None
    assert list(again) == [0.5, 0.25, 0.125]
    again.append(1.0)
    assert again.flush(tmp_path)["spans"] == [[0, 4]]  # every step written again


def _restored(run_dir, entry):
    """What a restore of a 2-step checkpoint gives: its note, or the error it raised."""
    try:
        return LossRecord().restore(run_dir, 2, {"losses": [0.25], RECORD_KEY: entry})
    except ConfigError as err:
        return err


def test_a_fifo_or_a_link_at_losses_bin_is_refused_not_waited_on(tmp_path):
    """RELIABILITY 1540: a FIFO at losses.bin blocked the resume's open forever (its read followed
    a link the flush refuses); both now say what the file is."""
    record = LossRecord()
    record.append(0.5)
    record.append(0.25)
    entry = record.flush(tmp_path)
    path = tmp_path / LOSSES_FILE
    path.unlink()
    os.mkfifo(path)
    notes: list = []
    reader = threading.Thread(
        target=lambda: notes.append(_restored(tmp_path, entry)),
        daemon=True,
    )
    reader.start()
    reader.join(10)
    if reader.is_alive():  # the old code's open: a writer's open and close lets it end
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        reader.join()
        pytest.fail("the resume's read of a FIFO at losses.bin blocked")
    # RELIABILITY 1642: refused before training (each checkpoint appends to it), not read as lost
    assert isinstance(notes[0], ConfigError) and "not a regular file" in str(notes[0])
    assert "then resume" in str(notes[0])
    with pytest.raises(OSError, match="not a regular file"):
        record.flush(tmp_path)
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere.bin")
    with pytest.raises(OSError, match="symbolic link"):
        loss_record.read_span(path, entry, 2)
    with pytest.raises(OSError, match="symbolic link"):
        record.flush(tmp_path)


def test_a_losses_bin_removed_or_replaced_mid_run_gets_every_step_again(tmp_path):
    """RELIABILITY 1548: losses.bin removed (a clean-up by hand) or replaced by another file while a
    run trained: its next checkpoints named bytes the file no longer held, and their resume listed
    every step before the window as NaN. Now the next flush writes every step again at the file's
    end; a discard leaves a file it did not write as it is."""
    path = tmp_path / LOSSES_FILE
    record = LossRecord()
    for loss in (0.5, 0.25, 0.125):
        record.append(loss)
    record.flush(tmp_path)
    path.unlink()
    record.append(1.0)
    entry = record.flush(tmp_path)
    assert entry["spans"] == [[0, 4]] and path.stat().st_size == 32
    again = LossRecord()
    assert again.restore(tmp_path, 4, {"losses": [1.0], RECORD_KEY: entry}) is None
    assert list(again) == [0.5, 0.25, 0.125, 1.0]
    other = b"\x01" * 40  # another file put in its place, longer than this session's part
    path.with_name("other").write_bytes(other)
    path.with_name("other").replace(path)
    record.append(2.0)
    entry = record.flush(tmp_path)
    assert entry["spans"] == [[40, 5]] and path.read_bytes()[:40] == other
    again = LossRecord()
    assert again.restore(tmp_path, 5, {"losses": [2.0], RECORD_KEY: entry}) is None
    assert list(again) == [0.5, 0.25, 0.125, 1.0, 2.0]
    path.with_name("other").write_bytes(other)
    path.with_name("other").replace(path)
    record.discard()  # not the file it wrote: left whole
    assert path.read_bytes() == other


def test_a_resume_refuses_a_link_or_a_fifo_at_losses_bin_before_training(tmp_path):
    """RELIABILITY 1642: the resume read such a losses.bin as lost and then failed the run at its
    first checkpoint's append, after training up to it. The job service's resume check and the
    engine's restore now refuse it first, naming the file and what to do."""
    record = LossRecord()
    record.append(0.5)
    entry = record.flush(tmp_path)
    path = tmp_path / LOSSES_FILE
    assert losses_file_problem(tmp_path) is None  # the run's own file
    path.unlink()
    assert losses_file_problem(tmp_path) is None  # none there: the next checkpoint writes one
    path.symlink_to(tmp_path / "elsewhere.bin")
    why = losses_file_problem(tmp_path)
    assert why is not None and "a symbolic link" in why and str(path) in why
    with pytest.raises(ConfigError, match="symbolic link") as err:
        LossRecord().restore(tmp_path, 1, {"losses": [0.5], RECORD_KEY: entry})
    assert err.value.problems[0].field == "resume"
    path.unlink()
    path.mkdir()
    assert "not a regular file" in losses_file_problem(tmp_path)


def test_a_resume_refuses_a_read_only_losses_bin_before_training(tmp_path):
    """RELIABILITY 1740: a losses.bin the run cannot write (read-only: its mode, a mount) passed the
    resume's checks; the resume trained up to its first checkpoint, whose append then failed the
    run. The job service's resume check and the engine's restore now refuse it first, naming the
    file and the fix; the file is left as it was."""
    record = LossRecord()
    record.append(0.5)
    entry = record.flush(tmp_path)
    path = tmp_path / LOSSES_FILE
    before = path.read_bytes()
    with read_only(path):
        why = losses_file_problem(tmp_path)
        assert why is not None and str(path) in why and "cannot be written" in why and "chmod u+w" in why
        with pytest.raises(ConfigError, match="cannot be written") as err:
            LossRecord().restore(tmp_path, 1, {"losses": [0.5], RECORD_KEY: entry})
        assert err.value.problems[0].field == "resume"
    assert path.read_bytes() == before and losses_file_problem(tmp_path) is None
    with read_only(tmp_path):  # the run folder: every checkpoint stages there
        why = losses_file_problem(tmp_path)
        assert why is not None and f"the run folder {tmp_path} is " in why and "make it writable" in why
    assert losses_file_problem(tmp_path) is None


@pytest.mark.skipif(
    os.geteuid() == 0, reason="root reads any file: a write-only mode stops no open of root's"
)
def test_a_resume_refuses_a_losses_bin_it_may_write_but_not_read(tmp_path):
    """RELIABILITY 1882: the check opened the file write-only while the appends open it for
    reading and writing: a losses.bin of mode 0o200 passed, and the first checkpoint failed."""
    LossRecord().flush(tmp_path)
    path = tmp_path / LOSSES_FILE
    path.chmod(0o200)
    try:
        why = losses_file_problem(tmp_path)
        assert why is not None and str(path) in why and "cannot be written" in why
        with pytest.raises(PermissionError):
            LossRecord().flush(tmp_path)  # what the check now foresees
    finally:
        path.chmod(0o644)
