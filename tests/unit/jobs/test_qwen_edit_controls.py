"""Qwen-Image-Edit's flavours and their control counts: the Plus checkpoints (2509; 2511, whose
transformer says zero_cond_t) are read from model_index and the transformer config and load as
QwenImageEditPlusPipeline; Plus takes 0-3 controls per image, the edit pipeline one, and a
dataset with more is refused naming its files."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio import families
from lorastudio.errors import ConfigError
from lorastudio.jobs.preflight import preflight_report
from lorastudio.jobs.validation import validate_run
from lorastudio.settings import Settings
from lorastudio.tiny.paired import make_paired_dataset

FAMILY = "qwen-image-edit"


@pytest.fixture(scope="module")
def plus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny Qwen-Image-Edit-Plus folders: "2509" and "2511" (zero_cond_t)."""
    from lorastudio.tiny.qwen_edit import build_qwen_image_edit

    out = {}
    for name, zero in (("2509", False), ("2511", True)):
        out[name] = tmp_path_factory.mktemp(name) / "plus"
        build_qwen_image_edit(0, plus=True, zero_cond_t=zero).save_pretrained(out[name])
    return out


def _paired(settings: Settings, slots: int) -> None:
    """The paired tiny dataset as "pairs" with `slots` control folders (control, control_2, ...)."""
    root = make_paired_dataset(settings.datasets_dir / "pairs")
    for n in range(2, slots + 1):
        shutil.copytree(root / "control", root / f"control_{n}")


def _cfg(model: Path) -> dict:
    return {"family": FAMILY, "base_model": str(model), "data_dir": "pairs", "resolution": 32, "steps": 2}


def test_each_checkpoint_is_its_flavour_and_loads_its_pipeline(plus, tiny_model: Callable[[str], Path]):
    from lorastudio.generate import load_pipeline

    fam = families.get(FAMILY)
    rows = {name: fam.folder_variant(folder) for name, folder in {**plus, "edit": tiny_model(FAMILY)}.items()}
    assert {name: row.name for name, row in rows.items()} == {
        "2509": "edit-2509",
        "2511": "edit-2511",
        "edit": "edit",
    }
    assert fam.source_control_images(plus["2509"]) == (0, 3)  # none: text-to-image
    assert fam.source_control_images(tiny_model(FAMILY)) == (1, 1)
    assert (
        type(load_pipeline(str(plus["2511"]), FAMILY, device="cpu")).__name__ == "QwenImageEditPlusPipeline"
    )


def test_plus_takes_two_controls_the_edit_pipeline_refuses_them_by_name(
    plus, settings: Settings, tiny_model: Callable[[str], Path]
):
    _paired(settings, 2)
    run = validate_run(_cfg(plus["2509"]), settings, live_output_names=set())
    assert preflight_report(run)["dataset"]["controls"]["per_image"] == 2
    with pytest.raises(ConfigError) as err:
        validate_run(_cfg(tiny_model(FAMILY)), settings, live_output_names=set())
    messages = [p.message for p in err.value.problems if p.field == "data_dir"]
    assert any("shape_00.png: 2 control images, qwen-image-edit takes at most 1" in m for m in messages)


def test_plus_refuses_a_fourth_control_by_name(plus, settings: Settings):
    _paired(settings, 4)
    with pytest.raises(ConfigError) as err:
        validate_run(_cfg(plus["2511"]), settings, live_output_names=set())
    messages = [p.message for p in err.value.problems if p.field == "data_dir"]
    assert any("shape_03.png: 4 control images, qwen-image-edit takes at most 3" in m for m in messages)


def test_plus_states_text_to_image_edit_or_both_in_the_preflight(plus, settings: Settings):
    """Edit-Plus trains text-to-image without controls, edit with them, both on a mixed set."""
    pairs = make_paired_dataset(settings.datasets_dir / "pairs")
    mixed = preflight_report(validate_run(_cfg(plus["2511"]), settings, live_output_names=set()))
    assert mixed["dataset"]["mode"]["kind"] == "edit"
    (pairs / "control" / "shape_05.png").unlink()
    mixed = preflight_report(validate_run(_cfg(plus["2511"]), settings, live_output_names=set()))
    assert (
        mixed["dataset"]["mode"]["kind"] == "mixed"
        and "1 text-to-image sample(s)" in mixed["dataset"]["mode"]["note"]
    )
    shutil.rmtree(pairs / "control")
    plain = preflight_report(validate_run(_cfg(plus["2509"]), settings, live_output_names=set()))
    assert plain["dataset"]["mode"]["kind"] == "text-to-image" and plain["dataset"]["controls"] is None
