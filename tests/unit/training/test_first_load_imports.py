"""A standby worker's imports (jobs/standby.PRELOAD, then families/preload.py) leave none of
diffusers' or transformers' model, pipeline or loader modules for a run to import: those lazy
imports were 2.6 s of a real FLUX.1 job's time to its first step on an H100 (RESULTS note 43)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio.config import TrainConfig

PROBE = """
import importlib, json, sys
from lorastudio.jobs import standby
for name in standby.PRELOAD:
    try:
        importlib.import_module(name)
    except ImportError:
        pass
if sys.argv[2] == "families":
    from lorastudio.families.preload import import_family_classes
    import_family_classes()
from lorastudio.config import TrainConfig
from lorastudio.training.loop import train
cfg = TrainConfig.model_validate(json.loads(open(sys.argv[1]).read()))
before = set(sys.modules)
train(cfg, lambda event: None, device="cpu")
print(json.dumps(sorted(m for m in set(sys.modules) - before if m.split(".")[0] in ("diffusers", "transformers"))))
"""


def _imports_of_a_run(config: TrainConfig, tmp_path: Path, preload: str) -> list[str]:
    """The diffusers and transformers modules a 1-step run imports in a process that imported
    what a standby does (`preload`: "families") or only jobs/standby.PRELOAD ("none")."""
    path = tmp_path / f"config-{preload}.json"
    raw = json.loads(config.model_dump_json(exclude_unset=True))
    path.write_text(json.dumps({**raw, "output_name": f"run-{preload}"}))
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(path), preload], capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("family", ["flux", "sdxl"])
def test_a_standby_leaves_a_run_no_model_module_to_import(
    family: str, make_config: Callable[..., TrainConfig], tmp_path: Path
) -> None:
    config = make_config(family, steps=1)
    without = _imports_of_a_run(config, tmp_path, "none")
    found = _imports_of_a_run(config, tmp_path, "families")
    heavy = ("diffusers.models.", "diffusers.pipelines.", "diffusers.loaders", "transformers.models.")
    assert len([m for m in without if m.startswith(heavy)]) > 50, without  # what the preload saves
    assert [m for m in found if m.startswith(heavy)] == [], found
    assert len(found) < 20, found  # a few scheduler modules (model_index.json names the run's)
