"""Caption jobs outlive the server (jobs/caption_records.py): a finished job is answered by the
next server from its record; a server killed with kill -9 mid-job leaves a record that reads
"interrupted" with what was done; the records are bounded (the newest KEEP) and a running job's
record is rewritten at most every RECORD_EVERY_S, not per image. The worker is a real spawned
child (caption_fake_workers)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from caption_fake_workers import slow_fake_captioner
from fastapi.testclient import TestClient
from PIL import Image

from live_server import LOOPBACK
from lorastudio.api.app import create_app
from lorastudio.captioning.options import CaptionOptions
from lorastudio.errors import NotFound
from lorastudio.jobs import caption_records
from lorastudio.jobs.caption_job import CaptionJob
from lorastudio.jobs.caption_records import KEEP, CaptionRecorder, list_records, read_record, records_dir
from lorastudio.jobs.captioning import CaptionJobs
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.processes import start_token
from lorastudio.settings import get_settings
from polling import until


def _dataset(images: int) -> Path:
    settings = get_settings().ensure_dirs()
    folder = settings.datasets_dir / "ds"
    folder.mkdir()
    for i in range(images):
        Image.new("RGB", (32, 32), (10 * i, 10, 10)).save(folder / f"img{i:02d}.png")
    return folder


@pytest.fixture
def model(tmp_path: Path) -> str:
    folder = tmp_path / "vlm"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "qwen2_5_vl"}', encoding="utf-8")
    return str(folder)


def _jobs() -> CaptionJobs:
    return CaptionJobs(
        get_settings(), GpuArbiter(), target=slow_fake_captioner, host_device=lambda: "cpu", gpus=lambda: ()
    )


def test_a_finished_job_is_answered_by_the_next_server(model: str) -> None:
    _dataset(3)
    first = _jobs()
    try:
        job = first.start("ds", CaptionOptions(model=model, device="cpu"))
        final = first.wait(job["id"], 60)
    finally:
        first.shutdown()
    assert (final["status"], final["captioned"]) == ("completed", 3)
    again = _jobs()  # a new server on the same home: nothing in memory
    assert again.get(job["id"]) == final
    assert again.latest("ds") == final
    assert [j["id"] for j in again.recent()] == [job["id"]]
    with pytest.raises(NotFound):
        again.get("0123456789ab")
    with pytest.raises(NotFound):
        again.get("../../etc/passwd")


_SERVER = """
import sys, time
from caption_fake_workers import slow_fake_captioner
from lorastudio.api.app import create_app
from lorastudio.captioning.options import CaptionOptions
from lorastudio.jobs.captioning import CaptionJobs
from lorastudio.jobs.gpu import GpuArbiter
from lorastudio.settings import get_settings
jobs = CaptionJobs(get_settings(), GpuArbiter(), target=slow_fake_captioner, host_device=lambda: "cpu",
                   gpus=lambda: ())
print(jobs.start("ds", CaptionOptions(model=sys.argv[1], device="cpu"))["id"], flush=True)
time.sleep(600)
"""


def test_a_job_of_a_server_killed_outright_reads_interrupted_with_what_it_did(model: str) -> None:
    _dataset(40)  # 0.4 s an image: 16 s, killed well before the end
    here = Path(__file__).parent
    import lorastudio

    src = Path(lorastudio.__file__).parents[1]  # this tree's code, as the test imports it
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here), str(src)])}
    server = subprocess.Popen(
        [sys.executable, "-c", _SERVER, model], stdout=subprocess.PIPE, text=True, env=env, cwd=here
    )
    try:
        job_id = server.stdout.readline().strip()
        assert job_id, server.communicate()
        record = records_dir(get_settings().home) / f"{job_id}.json"

        def progressed() -> dict | None:
            job = json.loads(record.read_text(encoding="utf-8"))["job"]
            return job if job["done"] >= 2 else None

        until(progressed, 120, "recorded progress")
        server.send_signal(signal.SIGKILL)
        server.wait(30)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(30)
    recorded = json.loads(record.read_text(encoding="utf-8"))["job"]
    assert recorded["status"] == "running"  # what the killed server left
    restarted = _jobs()
    job = restarted.get(job_id)
    assert job["status"] == "interrupted" and job["finished_at"]
    assert (job["total"], job["done"], job["captioned"]) == (40, recorded["done"], recorded["done"])
    assert f"the lorastudio server (pid {server.pid}) ended without recording the end" in job["error"]
    assert f"{recorded['done']} of 40 images were done" in job["error"]
    assert json.loads(record.read_text(encoding="utf-8"))["job"]["status"] == "interrupted"  # rewritten
    assert restarted.latest("ds")["status"] == "interrupted"
    # a new job on the same dataset runs (the dead server's claim went with it) and is listed first
    new = restarted.start("ds", CaptionOptions(model=model, device="cpu"))
    restarted._cancel(restarted._jobs[new["id"]], "test")
    restarted.wait(new["id"], 60)
    restarted.shutdown()
    assert [j["id"] for j in restarted.recent()] == [new["id"], job_id]


def test_a_running_record_is_rewritten_at_most_every_interval_not_per_image() -> None:
    home = get_settings().home
    now = [0.0]
    recorder = CaptionRecorder(home, "server", every_s=2.0, clock=lambda: now[0])
    snapshot = {
        **CaptionJob("00000000000a", "ds", Path("/x"), CaptionOptions(model="m"), "cpu").snapshot(),
        "created_at": "2026-12-06T00:00:00+00:00",
        "status": "running",
        "done": 0,
    }
    recorder.write(snapshot, force=True)
    for done in range(1, 5001):  # 5,000 images at 10 ms each: 50 s
        now[0] += 0.01
        recorder.write({**snapshot, "done": done})
    assert recorder.writes <= 1 + 50 / 2 + 1
    assert read_record(home, "00000000000a")["done"] >= 4800  # the last write is at most 2 s old
    recorder.write({**snapshot, "done": 5000, "status": "completed"}, force=True)
    assert read_record(home, "00000000000a") == {**snapshot, "done": 5000, "status": "completed"}


def test_the_newest_records_are_kept_never_a_live_running_one(monkeypatch: pytest.MonkeyPatch) -> None:
    home = get_settings().home
    live = caption_records.owner("server")  # this process: alive
    for i in range(KEEP + 5):
        status = "running" if i == 0 else "completed"
        job = {
            **CaptionJob(f"{i:012x}", "ds", Path("/x"), CaptionOptions(model="m"), "cpu").snapshot(),
            "created_at": f"2026-12-06T00:{i // 60:02d}:{i % 60:02d}+00:00",
            "status": status,
        }
        caption_records.write_record(home, job, live)
    assert caption_records.prune(home) == 4  # the 5 oldest, less the running one
    listed = [j["id"] for j in list_records(home, limit=10**6)]
    assert len(listed) == KEEP + 1 and listed[0] == f"{KEEP + 4:012x}" and listed[-1] == f"{0:012x}"
    assert not [p for p in records_dir(home).iterdir() if p.name.startswith(".")]  # nothing staged left


def test_a_record_whose_owner_lives_stays_running_and_a_dead_owner_is_settled_at_server_start() -> None:
    home = get_settings().home
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    who = {"pid": sleeper.pid, "start": start_token(sleeper.pid), "source": "cli"}
    job = {
        **CaptionJob("0000000000cc", "ds", Path("/x"), CaptionOptions(model="m"), "cpu").snapshot(),
        "done": 3,
    }
    caption_records.write_record(home, job, who)
    assert caption_records.settle(home) == 0
    assert read_record(home, job["id"])["status"] == "running"
    sleeper.kill()
    sleeper.wait(30)
    with TestClient(create_app(get_settings()), base_url=LOOPBACK) as client:  # the server's start settles it
        on_disk = json.loads((records_dir(home) / "0000000000cc.json").read_text(encoding="utf-8"))
        assert on_disk["job"]["status"] == "interrupted"
        assert "the `lorastudio datasets caption` process" in on_disk["job"]["error"]
        answered = client.get("/api/captions/0000000000cc")
        assert answered.status_code == 200 and answered.json()["status"] == "interrupted", answered.text
        listed = client.get("/api/captions")
        assert [j["id"] for j in listed.json()] == ["0000000000cc"]


def test_a_job_begun_after_the_clock_was_set_back_is_the_newest_and_kept() -> None:
    """RELIABILITY 931: KEEP records made in the hour before the clock was set back an hour (and
    one made before records were numbered); the next job, begun with an earlier created_at, is
    listed first and a later prune keeps it (it removed it by created_at)."""
    home = get_settings().home
    live = caption_records.owner("server")

    def job(i: int, hour: int) -> dict:
        snap = CaptionJob(f"{i:012x}", "ds", Path("/x"), CaptionOptions(model="m"), "cpu").snapshot()
        return {
            **snap,
            "created_at": f"2026-12-06T{hour:02d}:{i // 60:02d}:{i % 60:02d}+00:00",
            "status": "completed",
        }

    caption_records.write_record(home, job(999, 9), live)  # an old record: no seq
    for i in range(KEEP):
        recorder = CaptionRecorder(home, "server")
        recorder.write(job(i, 10), force=True)
    later = CaptionRecorder(home, "server")  # the clock set back an hour: created_at 09:..
    later.write(job(KEEP, 9), force=True)
    assert [j["id"] for j in list_records(home, limit=2)] == [f"{KEEP:012x}", f"{KEEP - 1:012x}"]
    assert list_records(home, limit=10**6)[-1]["id"] == f"{999:012x}"  # before numbering: the oldest
    assert caption_records.prune(home) == 2  # the unnumbered one, then the first numbered
    kept = {j["id"] for j in list_records(home, limit=10**6)}
    assert f"{KEEP:012x}" in kept and f"{999:012x}" not in kept and f"{0:012x}" not in kept
