"""Same seed -> byte-identical weights, identical tokenizer ids and dataset bytes in two processes:
this test process (the session's tiny models and sample dataset, built in-process by the
`tiny_model` and `sample_dataset` fixtures, usually long before, after whatever other tests ran)
and a fresh interpreter with another PYTHONHASHSEED (tests/tiny_fingerprint.py) that builds them
all again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from lorastudio.tiny import TINY_FAMILIES
from tiny_fingerprint import fingerprint

PROMPTS = ["a red circle on a blue background", "A Painting of a squirrel, eating 3 burgers!", "sks ohwx"]
SCRIPT = Path(__file__).resolve().parents[1] / "tiny_fingerprint.py"


def test_two_processes_build_identical_files(tmp_path, tiny_model, sample_dataset):
    models = {tiny_model(family).parent for family in TINY_FAMILIES}
    assert len(models) == 1  # the session's tiny models share one folder
    # a hash seed other than this process's: different set/dict-of-str orders
    hash_seed = "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": hash_seed}
    run = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "run"), json.dumps(PROMPTS)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    other = json.loads(run.stdout.strip().splitlines()[-1])
    first = fingerprint(models.pop(), sample_dataset, PROMPTS)
    assert first == other
    for family in TINY_FAMILIES:
        assert (
            sum(k.startswith(f"tiny-{family}/") for k in first["weights"]) >= 3
        )  # denoiser, vae, encoder(s)
    assert {k.split("/")[0] for k in first["ids"]} == set(TINY_FAMILIES)  # every family's tokenizer(s)
    assert sum(k.startswith(("sdxl/", "flux/")) for k in first["ids"]) == 4  # two tokenizers each
    assert all(len(ids) == len(PROMPTS) and all(ids) for ids in first["ids"].values())
    assert len(first["dataset"]) == 16
