"""Flavours as data: every registered family with FamilySpec.variants reads its flavour from the
checkpoint, the same way from a folder's JSON, from diffusers' configs and from a loaded
pipeline; each row is what a checkpoint carrying its facts resolves to, and brings its
generation defaults and note with it (preflight report, run sidecar)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from lorastudio import families
from lorastudio.families.base import config_facts
from lorastudio.families.common import pipeline_facts
from lorastudio.generate import load_pipeline
from lorastudio.jobs.preflight_family import family_section

WITH_VARIANTS = [n for n in families.names() if families.get(n).spec.variants]


def _with_facts(tiny: Path, out: Path, denoiser: str, facts: dict) -> Path:
    """A copy of the tiny folder's configs (weights linked) whose configs carry `facts`."""
    shutil.copytree(tiny, out, copy_function=lambda s, d: Path(d).symlink_to(Path(s).resolve()))
    for name, path in (("", out / "model_index.json"), (denoiser, out / denoiser / "config.json")):
        data = json.loads(path.resolve().read_text())
        for key, value in facts.items():
            owner, _, field = key.rpartition(".")
            if owner == name:
                data[field] = value
        path.unlink()
        path.write_text(json.dumps(data))
    return out


@pytest.mark.parametrize("family", WITH_VARIANTS)
def test_the_tiny_checkpoint_is_one_flavour_however_it_is_read(family, tiny_model):
    fam = families.get(family)
    folder = tiny_model(family)
    by_folder = fam.folder_variant(folder)
    assert by_folder is not None and by_folder in fam.spec.variants
    assert fam.variant(fam.checkpoint_facts(str(folder), None)) == by_folder
    pipe = load_pipeline(str(folder), family, device="cpu")
    assert fam.variant(pipeline_facts(pipe, fam.spec.denoiser)) == by_folder
    assert fam.source_variant(str(folder), None) == by_folder


@pytest.mark.parametrize("family", WITH_VARIANTS)
def test_each_row_is_read_from_the_facts_it_names(family, tiny_model, tmp_path):
    fam = families.get(family)
    spec = fam.spec
    for i, row in enumerate(spec.variants):
        folder = _with_facts(tiny_model(family), tmp_path / row.name, spec.denoiser, dict(row.when))
        index = json.loads((folder / "model_index.json").read_text())
        denoiser = json.loads((folder / spec.denoiser / "config.json").read_text())
        facts = config_facts(index, spec.denoiser, denoiser)
        first = next(r for r in spec.variants if all(facts.get(k) == v for k, v in r.when.items()))
        assert fam.folder_variant(folder) == first and spec.variants.index(first) <= i
        assert fam.generation_defaults(facts) == {**spec.generation_defaults, **first.generation_defaults}
        section = family_section(_cfg(family, folder), folder)  # the preflight report's view
        assert section["variant"] == first.title
        assert section["notes"] == ([first.note] if first.note else [])


def _cfg(family: str, folder: Path):
    from lorastudio.config import TrainConfig

    return TrainConfig(family=family, base_model=str(folder), data_dir="unused")


DISTILLED_ROWS = [
    n for n in WITH_VARIANTS if any("is_distilled" in r.when for r in families.get(n).spec.variants)
]


@pytest.mark.parametrize("family", DISTILLED_ROWS)
def test_the_variant_and_family_distilled_read_one_flag(family, tiny_model, tmp_path):
    """Family.distilled (what assistant_lora needs) reads model_index's is_distilled as the variant
    rows do: a distilled flavour is a distilled base (assistant_lora accepted), a base flavour is
    not (refused), and an absent flag is the pipeline's default for both."""
    from safetensors.torch import save_file

    from lorastudio.config import TrainConfig
    from lorastudio.training.adapters.assistant_rules import assistant_problems

    fam = families.get(family)
    adapter = tmp_path / "assistant.safetensors"
    save_file({"x": torch.zeros(1)}, str(adapter))
    for flag in (True, False, None):
        facts = {} if flag is None else {"is_distilled": flag}
        folder = _with_facts(tiny_model(family), tmp_path / f"flag-{flag}", fam.spec.denoiser, facts)
        if flag is None:  # no flag at all: the pipeline's default
            index = json.loads((folder / "model_index.json").read_text())
            index.pop("is_distilled", None)
            (folder / "model_index.json").write_text(json.dumps(index))
        distilled, where = fam.distilled(str(folder), None)
        assert distilled is (flag is True) and "model_index.json" in where
        assert fam.folder_variant(folder).when.get("is_distilled", False) is distilled
        cfg = TrainConfig(
            family=family, base_model=str(folder), data_dir="unused", assistant_lora=str(adapter)
        )
        problems = assistant_problems(cfg, fam)
        if distilled:
            assert problems == []
        else:
            assert len(problems) == 1 and "not step-distilled" in problems[0].message
