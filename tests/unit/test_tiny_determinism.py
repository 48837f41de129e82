"""Same seed -> byte-identical weights, identical tokenizer ids and dataset bytes in two processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from lorastudio.tiny import TINY_FAMILIES

PROMPTS = ["a red circle on a blue background", "A Painting of a squirrel, eating 3 burgers!", "sks ohwx"]

# Builds every tiny model and the dataset under argv[1], then prints a JSON fingerprint: sha256 of
# every weight and dataset file, and the ids each saved tokenizer (loaded back) gives PROMPTS.
_SCRIPT = """
import hashlib, json, sys
from pathlib import Path
from transformers import AutoTokenizer
from lorastudio import tiny

out, prompts = Path(sys.argv[1]), json.loads(sys.argv[2])
digest = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()
result = {"weights": {}, "ids": {}, "dataset": {}}
for family in tiny.TINY_FAMILIES:
    folder = tiny.save_tiny_model(family, tiny.tiny_model_dir(family, out))
    for path in sorted(folder.rglob("*.safetensors")):
        result["weights"][path.relative_to(out).as_posix()] = digest(path)
    for sub in sorted(p for p in folder.iterdir() if p.name.startswith("tokenizer")):
        tok = AutoTokenizer.from_pretrained(sub)
        result["ids"][f"{family}/{sub.name}"] = [tok(p).input_ids for p in prompts]
data = tiny.make_sample_dataset(out / "data")
result["dataset"] = {p.name: digest(p) for p in sorted(data.iterdir())}
print(json.dumps(result))
"""


def test_two_processes_build_identical_files(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", _SCRIPT, str(tmp_path / f"run{i}"), json.dumps(PROMPTS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**env, "PYTHONHASHSEED": str(i + 1)},  # different set/dict-of-str orders
        )
        for i in range(2)
    ]
    outputs = []
    for run in runs:
        stdout, stderr = run.communicate(timeout=300)
        assert run.returncode == 0, stderr[-3000:]
        outputs.append(json.loads(stdout.strip().splitlines()[-1]))
    first, second = outputs
    assert first == second
    for family in TINY_FAMILIES:
        assert (
            sum(k.startswith(f"tiny-{family}/") for k in first["weights"]) >= 3
        )  # denoiser, vae, encoder(s)
    assert {k.split("/")[0] for k in first["ids"]} == set(TINY_FAMILIES)  # every family's tokenizer(s)
    assert sum(k.startswith(("sdxl/", "flux/")) for k in first["ids"]) == 4  # two tokenizers each
    assert all(len(ids) == len(PROMPTS) and all(ids) for ids in first["ids"].values())
    assert len(first["dataset"]) == 16
