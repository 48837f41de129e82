"""The "removed after so long" clean-ups against a wall clock set back or forward (a host booted
in 1970 and then put right, a clock running ahead): a file's age is its boot-clock age where the
studio recorded one this boot, and a file stamped in the future is never old (file_age.py;
RELIABILITY 1096). In process, no torch."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import pytest
from PIL import Image

from lorastudio import file_age
from lorastudio.jobs.references import prune_orphans, references_dir, store_reference, use_reference
from lorastudio.settings import Settings, get_settings

YEAR_1970 = 86_400.0  # a file written while the clock said 2 January 1970
YEAR_2038 = 2_147_000_000.0  # one written while it ran 11 years ahead


def _png() -> io.BytesIO:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(out, format="PNG")
    out.seek(0)
    return out


def _stamp(path: Path, when: float) -> None:
    os.utime(path, (when, when), follow_symlinks=False)


def test_a_reference_uploaded_while_the_clock_said_1970_is_not_removed_as_ancient(
    studio_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Uploaded minutes ago on this boot's clock, stamped 1970 by the wall clock of then: kept by
    the next upload's prune (the old code removed it: 56 years "old", and the page's next
    generation naming it got the 400 saying it was removed). One stamped in 2038 and unused for
    longer than the limit on the boot clock is removed (the old code kept it till 2038); a file
    the studio did not record is judged by its mtime, kept when it is from the future."""
    boot = [0.0]  # the host's boot clock, moved by the test
    monkeypatch.setattr(file_age, "host_now", lambda: boot[0])
    settings: Settings = get_settings().ensure_dirs()
    early = store_reference(settings, "early.png", _png())
    _stamp(references_dir(settings) / early, YEAR_1970)
    assert prune_orphans(settings) == 0
    assert (references_dir(settings) / early).is_file()

    boot[0] = 100.0
    ahead = store_reference(settings, "ahead.png", _png())
    _stamp(references_dir(settings) / ahead, YEAR_2038)
    by_hand = references_dir(settings) / ("0" * 32 + ".png")  # copied in, unrecorded
    by_hand.write_bytes(_png().getvalue())
    _stamp(by_hand, YEAR_2038)
    old_by_hand = references_dir(settings) / ("1" * 32 + ".png")
    old_by_hand.write_bytes(_png().getvalue())
    _stamp(old_by_hand, time.time() - 8 * 24 * 3600)
    boot[0] = 1000.0
    assert use_reference(settings, early) is not None  # used again: its age starts again
    removed = prune_orphans(settings, older_than_s=500)  # ahead: 900 s old on the boot clock
    names = sorted(p.name for p in references_dir(settings).iterdir() if not p.name.startswith("."))
    assert (removed, names) == (2, sorted([early, by_hand.name]))


def test_a_file_stamped_in_the_future_is_never_old() -> None:
    now = 1_000_000.0
    assert file_age.older_than(now - 601, 600, now)
    assert not file_age.older_than(now - 599, 600, now)
    assert not file_age.older_than(now + 10 * 365 * 86_400, 600, now)  # a clock set back since: kept
    assert not file_age.older_than(now + 1, 0.5, now)  # within a coarse file system's tick: not "future" yet


def test_a_finished_runs_duration_is_its_monotonic_elapsed_not_two_wall_clock_stamps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RELIABILITY 1097: a run's Duration was finished_at less started_at, so the clock set back
    an hour 30 s into a run made it "-59m 30s" (the page showed "–"). The record now keeps
    elapsed_s on the recording process's monotonic clock (a CLI run's here; the job service's
    through Job.elapsed_s), which the runs list and a run's detail answer."""
    import types

    from lorastudio.api.schemas_runs import RunSummary
    from lorastudio.config import parse_train_config, resolve_train_config
    from lorastudio.jobs import cli_record
    from lorastudio.jobs.store import RunStore

    mono, stamps = [1000.0], iter(["2026-12-07T10:00:00+00:00", "2026-12-07T09:00:30+00:00"])
    monkeypatch.setattr(cli_record, "time", types.SimpleNamespace(monotonic=lambda: mono[0]), raising=False)
    monkeypatch.setattr(cli_record, "now_iso", lambda: next(stamps))
    cfg = parse_train_config(
        {"family": "flux", "base_model": "acme/base", "data_dir": "shapes", "output_name": "r"}
    )
    store = RunStore.open(tmp_path / "runs.db")
    record = cli_record.CliRunRecord(store, cfg, resolve_train_config(cfg)).start()
    mono[0] = 1030.5  # 30.5 s later, the wall clock an hour back meanwhile
    record.end(False, 3, None)
    record.close()
    store = RunStore.open(tmp_path / "runs.db")
    (listed,) = store.list_runs()
    assert (listed["started_at"], listed["finished_at"]) == (
        "2026-12-07T10:00:00+00:00",
        "2026-12-07T09:00:30+00:00",
    )
    assert RunSummary.model_validate(listed).elapsed_s == 30.5
    assert RunSummary.model_validate(store.get_run(record.run_id)).elapsed_s == 30.5


def test_a_live_runs_elapsed_is_the_services_so_far_never_an_earlier_sessions() -> None:
    """While a run is live the list and the detail answer the server's job's elapsed_s so far
    (its monotonic clock), null for another process's (a CLI run), never the stored elapsed_s
    of the session a resume continues."""
    import types

    from lorastudio.api.routes.runs import _elapsed
    from lorastudio.errors import NotFound

    def job(run_id: str) -> dict[str, float]:
        if run_id != "served":
            raise NotFound(run_id)
        return {"elapsed_s": 12.5}

    service = types.SimpleNamespace(job=job)
    resumed = {"id": "served", "status": "running", "elapsed_s": 30.5}  # its first session's
    assert _elapsed(resumed, service)["elapsed_s"] == 12.5  # type: ignore[arg-type]
    assert _elapsed({"id": "cli", "status": "running", "elapsed_s": 30.5}, service)["elapsed_s"] is None  # type: ignore[arg-type]
    assert _elapsed({"id": "cli", "status": "completed", "elapsed_s": 30.5}, service)["elapsed_s"] == 30.5  # type: ignore[arg-type]


def test_a_ledger_planted_as_a_fifo_or_a_device_link_reads_as_empty_and_is_replaced(tmp_path: Path) -> None:
    """RELIABILITY 1163: the ledger was read with read_bytes: a FIFO at its name blocked the
    reading thread for ever under the process-wide ledger lock (every reference upload and
    generation with references then hung), a link to /dev/zero read until memory ran out."""
    import threading

    path = tmp_path / ".uses.json"
    os.mkfifo(path)
    answers: list[dict[str, float]] = []
    reader = threading.Thread(target=lambda: answers.append(file_age.BootLedger(path).ages()), daemon=True)
    reader.start()
    reader.join(30)  # a bound for the old code's hang, not a measurement
    hung = reader.is_alive()
    if hung:  # let the old code's reader go (EOF), so the lock is free for later tests
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(30)
    assert not hung and answers == [{}]
    path.unlink()
    path.symlink_to("/dev/zero")
    assert file_age.BootLedger(path).ages() == {}
    if file_age.boot_id() is not None:
        file_age.BootLedger(path).note("a")
        assert not path.is_symlink() and set(file_age.BootLedger(path).ages()) == {"a"}
        at = '{"a": 1.0, "nan": NaN, "inf": -Infinity}'  # a never-old entry each: dropped
        path.write_text(f'{{"boot": "{file_age.boot_id()}", "at": {at}}}')
        assert set(file_age.BootLedger(path).ages()) == {"a"}
