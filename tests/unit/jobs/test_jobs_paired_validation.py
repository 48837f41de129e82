"""Validation and the preflight report of a paired (edit) dataset: pairs and counts shown,
parallel control_dirs kept under the datasets root, an unpaired edit dataset refused by name."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio.errors import ConfigError
from lorastudio.jobs import vram_estimate
from lorastudio.jobs.hardware import host_info
from lorastudio.jobs.preflight import estimate_memory_gb, plan_for_estimate, preflight_report
from lorastudio.jobs.validation import validate_run
from lorastudio.settings import Settings
from lorastudio.tiny.paired import make_paired_dataset


def _cfg(model: Path, **over: object) -> dict:
    base = {"family": "flux-kontext", "base_model": str(model), "data_dir": "pairs", "resolution": 32}
    return {**base, "steps": 3, "max_sequence_length": 16, **over}


def test_the_preflight_shows_the_pairs(
    settings: Settings, tiny_model: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    make_paired_dataset(settings.datasets_dir / "pairs")
    run = validate_run(_cfg(tiny_model("flux-kontext")), settings, live_output_names=set())
    controls = preflight_report(run)["dataset"]["controls"]
    assert controls["pairs"] == 8 and controls["per_image"] == 1 and controls["sources"] == ["control/"]
    assert controls["examples"][0] == {
        "target": "shape_00.png",
        "controls": ["control/shape_00.png"],
        "sizes": ["64x64 -> 1024x1024"],  # Kontext's preferred resolution for a square control
    }
    assert sum(controls["buckets"].values()) == 8
    json.dumps(controls)
    # the reference tokens join the sequence: more activation memory than FLUX.1 on the same weights
    monkeypatch.setitem(
        vram_estimate._ACT_GB_PER_BPARAM_BY_CLASS, "FluxTransformer2DModel", (1e6, 1e6)
    )  # tiny weights: make activations count
    plan = plan_for_estimate(run.config, host_info())
    kontext = estimate_memory_gb(run.config, run.model_dir, plan, 1)["phases"]["denoiser"]
    flux = estimate_memory_gb(run.config.model_copy(update={"family": "flux"}), run.model_dir, plan)
    assert kontext > flux["phases"]["denoiser"]


def test_control_dirs_are_kept_under_the_datasets_root(
    settings: Settings, tiny_model: Callable[[str], Path], tmp_path: Path
) -> None:
    pairs = make_paired_dataset(settings.datasets_dir / "pairs")
    shutil.move(pairs / "control", settings.datasets_dir / "pair-controls")  # ai-toolkit's layout
    run = validate_run(
        _cfg(tiny_model("flux-kontext"), control_dirs=["pair-controls"]), settings, live_output_names=set()
    )
    assert all(it.controls[0].parent.name == "pair-controls" for it in run.scan.items)
    with pytest.raises(ConfigError) as err:
        validate_run(
            _cfg(tiny_model("flux-kontext"), control_dirs=[str(tmp_path)]), settings, live_output_names=set()
        )
    assert any(p.field == "control_dirs" and "outside" in p.message for p in err.value.problems)


def test_a_control_dirs_folders_problem_names_the_control_dirs_field(
    settings: Settings, tiny_model: Callable[[str], Path]
) -> None:
    """The form shows a problem under its field: one of a control_dirs folder (the dataset folder
    itself, a folder missing) was answered under data_dir."""
    make_paired_dataset(settings.datasets_dir / "pairs")
    with pytest.raises(ConfigError) as err:
        validate_run(
            _cfg(tiny_model("flux-kontext"), control_dirs=["pairs", "nope"]),
            settings,
            live_output_names=set(),
        )
    assert [(p.field, p.message.split(" ", 1)[1]) for p in err.value.problems] == [
        ("control_dirs", "is not a folder"),
        (
            "control_dirs",
            "is the dataset folder itself: each image would be its own control; "
            "give the folder of the control images",
        ),
    ]


def test_an_edit_family_refuses_an_unpaired_dataset_by_name(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path]
) -> None:
    edit = {**_cfg(tiny_model("qwen-image-edit"), data_dir="shapes"), "family": "qwen-image-edit"}
    edit.pop("max_sequence_length")  # the edit pipelines never truncate: not offered
    with pytest.raises(ConfigError) as err:
        validate_run(edit, settings, live_output_names=set())
    messages = [p.message for p in err.value.problems if p.field == "data_dir"]
    assert any("shape_00.png: no control image (qwen-image-edit takes 1-1" in m for m in messages)


def _flux2_cfg(model: Path, data_dir: str) -> dict:
    return {
        "family": "flux2-klein",
        "base_model": str(model),
        "data_dir": data_dir,
        "resolution": 32,
        "steps": 3,
    }


def test_flux2_states_text_to_image_edit_or_both_in_the_preflight(
    settings: Settings, shapes: Path, tiny_model: Callable[[str], Path]
) -> None:
    """FLUX.2 trains text-to-image without controls, edit with them, and both on a mixed set
    (the unpaired targets are allowed); the memory estimate counts the references it has."""
    model = tiny_model("flux2-klein")
    plain = preflight_report(validate_run(_flux2_cfg(model, "shapes"), settings, live_output_names=set()))
    assert plain["dataset"]["mode"]["kind"] == "text-to-image" and plain["dataset"]["controls"] is None
    assert "trains text-to-image here" in plain["dataset"]["mode"]["note"]

    pairs = make_paired_dataset(settings.datasets_dir / "pairs")
    for stem in ("shape_06", "shape_07"):  # two targets lose their controls: a mixed set
        (pairs / "control" / f"{stem}.png").unlink()
    mixed = preflight_report(validate_run(_flux2_cfg(model, "pairs"), settings, live_output_names=set()))
    assert mixed["dataset"]["mode"]["kind"] == "mixed"
    assert "6 edit sample(s)" in mixed["dataset"]["mode"]["note"]
    assert mixed["dataset"]["controls"]["pairs"] == 6 and mixed["dataset"]["controls"]["unpaired"] == 2
    assert mixed["memory"]["phases"]["denoiser"] >= plain["memory"]["phases"]["denoiser"]


def test_flux_kontext_trains_a_mixed_dataset_the_single_image_edit_model_names_the_unpaired(
    settings: Settings, tiny_model: Callable[[str], Path]
) -> None:
    """Kontext generates with image=None (text-to-image), so a mixed set trains both; the
    single-image Qwen-Image-Edit's prompt template always holds an image: its unpaired targets
    are named."""
    pairs = make_paired_dataset(settings.datasets_dir / "pairs")
    (pairs / "control" / "shape_03.png").unlink()
    mixed = preflight_report(
        validate_run(_cfg(tiny_model("flux-kontext")), settings, live_output_names=set())
    )
    assert (
        mixed["dataset"]["mode"]["kind"] == "mixed" and "7 edit sample(s)" in mixed["dataset"]["mode"]["note"]
    )
    edit = {**_cfg(tiny_model("qwen-image-edit")), "family": "qwen-image-edit"}
    edit.pop("max_sequence_length")
    with pytest.raises(ConfigError) as err:
        validate_run(edit, settings, live_output_names=set())
    messages = [p.message for p in err.value.problems if p.field == "data_dir"]
    assert any("shape_03.png: no control image" in m for m in messages)
    assert not any("shape_02.png" in m for m in messages)


@pytest.mark.parametrize(
    ("rule", "lines"),
    [
        (
            "pipeline",  # FluxKontextPipeline's preferred resolution nearest each control's aspect ratio
            [
                "64x64 -> 1024x1024 (pipeline ~1 MP preferred size) x 6",
                "96x64 -> 1248x832 (pipeline ~1 MP preferred size)",
                "64x96 -> 832x1248 (pipeline ~1 MP preferred size)",
            ],
        ),
        (
            "target",
            [
                "64x64 -> 32x32 (target bucket) x 6",
                "96x64 -> 32x32 (target bucket)",
                "64x96 -> 32x32 (target bucket)",
            ],
        ),
        (
            256,
            [
                "64x64 -> 256x256 (256x256 area) x 6",
                "96x64 -> 320x208 (256x256 area)",
                "64x96 -> 208x320 (256x256 area)",
            ],
        ),
    ],
)
def test_the_preflight_shows_how_controls_are_sized(
    settings: Settings,
    tiny_model: Callable[[str], Path],
    rule: object,
    lines: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lorastudio.cli.train_check import print_report  # the CLI's check prints the same line

    # tiny weights: make activations count (FLUX.1's measured rate, which the estimate uses)
    monkeypatch.setitem(vram_estimate._ACT_GB_PER_BPARAM_BY_CLASS, "FluxTransformer2DModel", (1e3, 1e3))
    make_paired_dataset(settings.datasets_dir / "pairs")
    run = validate_run(
        _cfg(tiny_model("flux-kontext"), control_resolution=rule), settings, live_output_names=set()
    )
    report = preflight_report(run)
    assert report["dataset"]["controls"]["sizes"] == lines
    assert report["config"]["control_resolution"] == rule
    # the estimate counts the controls' own pixels (1248x832 at a 32 px side: ~1000 targets' worth)
    denoiser = report["memory"]["phases"]["denoiser"]
    if rule == "pipeline":
        target = preflight_report(
            validate_run(
                _cfg(tiny_model("flux-kontext"), control_resolution="target"),
                settings,
                live_output_names=set(),
            )
        )
        assert denoiser > target["memory"]["phases"]["denoiser"]
    print_report(report)
    assert f"  controls       {lines[0]}\n" in capsys.readouterr().out


def test_the_host_forecast_counts_controls_of_their_own_size(
    settings: Settings, tiny_model: Callable[[str], Path]
) -> None:
    """Controls trained at the pipeline's ~1 MP (a 32 px target) take more cache and VAE memory
    than controls at their targets' buckets."""
    make_paired_dataset(settings.datasets_dir / "pairs")
    host = host_info()
    gb = {}
    for rule in ("target", "pipeline"):
        run = validate_run(
            _cfg(tiny_model("flux-kontext"), control_resolution=rule), settings, live_output_names=set()
        )
        gb[rule] = preflight_report(run, host)["memory"]["host_gb"]
    assert gb["pipeline"] > gb["target"]
