"""Data-parallel runs that end early, on two gloo processes (tests/ddp_launch.py): rank 0's stop
and save stops every rank and the checkpoint resumes in one process; rank 0's preflight (its
decode scan, run alone: training/rank_scan.py) stopped or failing ends every rank there; a
second run in the same process group follows its own preflight (RELIABILITY 390, slow)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ddp_launch import LORA_ATOL, LORA_RTOL, LOSS_RTOL, scenarios
from lorastudio.settings import get_settings
from lorastudio.training.loop import train


def test_rank_0_stop_and_save_stops_every_rank_and_the_checkpoint_resumes_in_one_process(
    make_config, launched
):
    cfg = scenarios(make_config)["stop"][1]
    ranks = launched.ranks("stop")
    assert [r["steps_run"] for r in ranks] == [2, 2] and all(r["stopped"] for r in ranks)
    assert ranks[0]["losses"] == pytest.approx(ranks[1]["losses"], rel=1e-12)
    # every rank polls (its beat to a job's launcher: jobs/rank_silence.py); rank 1's wish is ignored
    # (the counts differ since RELIABILITY 213: rank 0 polls before each of its decodes, rank 1
    # while it waits for rank 0's preflight)
    assert ranks[0]["polls"] > 0 and ranks[1]["polls"] > 0
    launched_dir = launched.outputs("stop") / "ddp"
    assert ranks[0]["lora_path"] == str(launched_dir / "ddp.safetensors")
    assert Path(ranks[0]["lora_path"]).is_file()
    assert sorted(p.name for p in (launched_dir / "checkpoints").iterdir()) == ["step-000002"]

    # num_gpus is resumable: the 2-rank checkpoint continues in one process, to the LoRA of an
    # uninterrupted one-process run (resumed in this test's own copy of the run folder)
    run_dir = Path(shutil.copytree(launched_dir, get_settings().outputs_dir / "ddp"))
    resumed = train(cfg.model_copy(update={"num_gpus": 1}), [].append, device="cpu", resume=run_dir)
    assert resumed.resumed_from == 2 and resumed.steps_run == 6 and not resumed.stopped
    single = train(make_config(steps=6, batch_size=2, output_name="single"), [].append, device="cpu")
    assert resumed.losses == pytest.approx(single.losses, rel=LOSS_RTOL)
    assert resumed.lora_path is not None and single.lora_path is not None
    expected, got = load_file(str(single.lora_path)), load_file(str(resumed.lora_path))
    for key, tensor in expected.items():
        torch.testing.assert_close(got[key], tensor, atol=LORA_ATOL, rtol=LORA_RTOL, msg=key)


def test_a_stop_during_rank_0s_decode_scan_stops_every_rank_before_any_model_loads(launched):
    """Rank 0 alone scans (with the decode progress and its stop check), the others wait for its
    outcome: a stop during the scan ends every rank there (before: each rank scanned alike and
    saw the stop at the first agreed poll after its models loaded)."""
    ranks = launched.ranks("scan-stop")
    assert all(r["stopped"] and r["steps_run"] == 0 and r["lora_path"] is None for r in ranks)
    assert "model_load_started" not in ranks[0]["events"] and ranks[0]["events"][-1] == "complete"
    assert "preparing" in ranks[0]["events"]  # its decode counts
    assert ranks[0]["full_decodes"] >= 1 and ranks[1]["full_decodes"] == 0  # rank 1 never scanned
    assert not (launched.outputs("scan-stop") / "ddp").exists()  # nothing claimed or written


def test_an_image_rank_0s_scan_refuses_fails_every_rank_naming_it(launched, broken_dataset):
    """Rank 0 tells the others its preflight failed; they run theirs (rank 0 recorded the good
    images) and meet the same error: no rank is left waiting for the outcome."""
    ranks = launched.ranks("scan-fail")
    bad = sorted(broken_dataset.glob("*.png"))[0].name
    assert all(bad in r["error"] and "corrupt" in r["error"] for r in ranks), ranks
    assert ranks[0]["error"] == ranks[1]["error"]
    assert ranks[1]["full_decodes"] == 1  # only the file rank 0 could not record
    assert "model_load_started" not in ranks[0]["events"] and ranks[0]["events"][-1] == "error"


@pytest.mark.slow  # one more launch scenario: two runs of a group started by the launched process
def test_a_second_run_in_the_same_group_follows_its_own_preflight(launched):
    """A script (accelerate launch) that starts the process group itself and calls train() twice:
    the first run stopped in rank 0's decode scan, the second trains on every rank. Before
    (RELIABILITY 390): the preflight's store keys were the first run's, so rank 1 read its
    STOPPED at once and ended the second run with 0 steps while rank 0 trained alone (and failed
    in a collective rank 1 never joined)."""
    ranks = launched.ranks("twice")
    assert all(r["first"]["stopped"] and r["first"]["steps_run"] == 0 for r in ranks), ranks
    for record in ranks:
        assert "error" not in record["second"], record["second"]
        assert record["second"]["steps_run"] == 2 and not record["second"]["stopped"]
    assert ranks[0]["second"]["losses"] == pytest.approx(ranks[1]["second"]["losses"], rel=1e-12)
    assert ranks[0]["second"]["lora_path"] is not None and ranks[1]["second"]["lora_path"] is None
