"""`lorastudio config import` of what session 35 left out: SimpleTuner's lycoris_config, OneTrainer's
sample definitions and weight dtypes, ai-toolkit's paired (control_path) and masked (mask_path)
datasets. Each peer example (tests/data/peer_configs/, SOURCES.md names the page it follows) is
written into a config the strict config accepts as `lorastudio train --check` reads it, with every
leaf reported. In-process, no torch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lorastudio.config_import import import_config
from lorastudio.errors import ConfigError
from peer_config_checks import DATA, every_leaf_reported, strict


def _lines(result) -> dict:
    return {line.peer: line for line in result.lines}


def test_ai_toolkit_kontext_paired_and_masked_example(tmp_path: Path) -> None:
    """ostris/ai-toolkit config/examples/train_lora_flux_kontext_24gb.yaml (control_path, the
    prompts' --ctrl_img) with a mask_path (toolkit/config_modules.py DatasetConfig)."""
    source = DATA / "ai-toolkit_flux_kontext.yaml"
    result = import_config(source)
    data = strict(result.text, tmp_path)
    assert data["family"] == "flux-kontext" and data["control_dirs"] == ["/data/kontext/sources"]
    assert data["unmasked_weight"] == 0.1  # mask_min_value, the masks being the entry's masks/
    prompts = data["sample_prompts"]
    # the options are not part of the prompt (before: "make the person smile  --ctrl_img /data/...")
    assert [p["prompt"] for p in prompts] == [
        "make the person smile", "give the person an afro", "turn this image into a cartoon",
    ]  # fmt: skip
    assert (prompts[1]["width"], prompts[1]["height"], prompts[1]["seed"]) == (768, 512, 43)
    assert (prompts[2]["width"], prompts[2]["seed"]) == (1024, 7)  # its own --seed over walk_seed
    lines = _lines(result)
    assert (
        "references are paths inside the dataset folder"
        in lines["config.process[0].sample.prompts[0] --ctrl_img"].note
    )
    assert lines["config.process[0].sample.prompts[2] --n"].outcome == "not carried"
    assert lines["config.process[0].datasets[0].mask_path"].outcome == "carried"
    every_leaf_reported(yaml.safe_load(source.read_text(encoding="utf-8")), result.lines)


def _ai_toolkit(tmp_path: Path, datasets: list[dict]) -> Path:
    doc = yaml.safe_load((DATA / "ai-toolkit_flux_kontext.yaml").read_text(encoding="utf-8"))
    doc["config"]["process"][0]["datasets"] = datasets
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def test_ai_toolkit_controls_of_several_datasets_and_masks_elsewhere(tmp_path: Path) -> None:
    """control_dirs pair one dataset: with two, a control folder that is the entry's control/ is
    read as it is, another is named with where to put it; a mask folder outside the entry too."""
    path = _ai_toolkit(tmp_path, [
        {"folder_path": "/d/a", "control_path": "/d/a/control", "control_path2": "/d/a/control_2"},
        {"folder_path": "/d/b", "control_path": "/d/b-sources", "mask_path": "/d/b-masks", "mask_min_value": 0.2},
    ])  # fmt: skip
    result = import_config(path)
    data = strict(result.text, tmp_path)
    assert "control_dirs" not in data and "unmasked_weight" not in data
    assert [d["path"] for d in data["datasets"]] == ["/d/a", "/d/b"]
    lines = _lines(result)
    root = "config.process[0].datasets"
    assert lines[f"{root}[0].control_path"].outcome == "carried"
    assert lines[f"{root}[0].control_path2"].ours == "datasets.0.path + control_2/"
    assert "move or link /d/b-sources to /d/b/control" in lines[f"{root}[1].control_path"].note
    assert "move or link /d/b-masks to /d/b/masks" in lines[f"{root}[1].mask_path"].note
    assert lines[f"{root}[1].mask_min_value"].outcome == "not carried"


def test_ai_toolkit_ui_nulls_are_no_folders(tmp_path: Path) -> None:
    """The ai-toolkit UI saves every dataset with `control_path: null`, `mask_path: null` and
    `mask_min_value: 0.1` (ui/src/types.ts DatasetConfig): no folder, never a refused import."""
    path = _ai_toolkit(
        tmp_path, [{"folder_path": "/d/a", "control_path": None, "mask_path": None, "mask_min_value": 0.1}]
    )
    result = import_config(path)
    data = strict(result.text, tmp_path)
    assert "control_dirs" not in data and "unmasked_weight" not in data
    lines = _lines(result)
    assert all(
        lines[f"config.process[0].datasets[0].{k}"].outcome == "not carried"
        for k in ("control_path", "mask_path", "mask_min_value")
    )


def test_ai_toolkit_control_paths_of_one_dataset_are_its_control_dirs_in_slot_order(tmp_path: Path) -> None:
    """Qwen-Image-Edit-Plus's control_path, control_path2 (ai-toolkit
    config/examples/train_lora_qwen_image_edit_plus2509_32gb_2controls.yaml)."""
    path = _ai_toolkit(
        tmp_path, [{"folder_path": "/d/a", "control_path2": "/c/two", "control_path": "/c/one"}]
    )
    data = strict(import_config(path).text, tmp_path)
    assert data["control_dirs"] == ["/c/one", "/c/two"]


def test_simpletuner_lokr_lycoris_config_example(tmp_path: Path) -> None:
    """bghira/SimpleTuner documentation/LYCORIS.md: lora_type lycoris with its lycoris_config."""
    source = DATA / "simpletuner_lokr" / "config.json"
    result = import_config(source)
    data = strict(result.text, tmp_path)
    assert (data["adapter"], data["lokr_factor"]) == ("lokr", 16)
    # linear_dim 10000: LyCORIS' full matrix, scale 1 (its linear_alpha ignored)
    assert (data["lora_rank"], data["lora_alpha"]) == (1024, 1024)
    lines = _lines(result)
    assert lines["lora_rank"].outcome == "not carried"  # SimpleTuner's peft rank, unused by LyCORIS
    assert lines["lycoris_config.json.apply_preset"].outcome == "not carried"
    assert lines["lycoris_config.json.linear_alpha"].outcome == "not carried"
    every_leaf_reported(json.loads(source.read_text()), result.lines)
    every_leaf_reported(
        json.loads((source.parent / "lycoris_config.json").read_text()), result.lines, "lycoris_config.json"
    )


@pytest.mark.parametrize(
    ("lycoris", "want"),
    [
        ({"algo": "loha", "linear_dim": 32, "linear_alpha": 16, "factor": 8}, {"adapter": "loha", "lora_rank": 32, "lora_alpha": 16}),
        ({"algo": "lokr", "linear_dim": 64, "linear_alpha": 32, "factor": -1, "decompose_both": True},
         {"adapter": "lokr", "lora_rank": 64, "lora_alpha": 32, "lokr_factor": -1, "lokr_decompose_both": True}),
        ({"algo": "lokr", "linear_dim": 16, "full_matrix": True, "factor": 4}, {"adapter": "lokr", "lora_rank": 1024, "lora_alpha": 1024}),
        ({"algo": "lora", "linear_dim": 16, "linear_alpha": 8, "weight_decompose": True, "conv_dim": 8},
         {"adapter": "dora", "lora_rank": 16, "lora_alpha": 8}),
        ({"algo": "diag-oft", "linear_dim": 16}, {"adapter": None, "lora_rank": None}),
    ],
)  # fmt: skip
def test_simpletuner_lycoris_algos(tmp_path: Path, lycoris: dict, want: dict) -> None:
    folder = tmp_path / "st"
    folder.mkdir()
    source = DATA / "simpletuner_lokr"
    for name in ("config.json", "multidatabackend.json"):
        (folder / name).write_text((source / name).read_text())
    (folder / "lycoris_config.json").write_text(json.dumps(lycoris))
    result = import_config(folder / "config.json")
    data = strict(result.text, tmp_path)
    for key, value in want.items():
        assert data.get(key) == value, (key, data)
    every_leaf_reported(lycoris, result.lines, "lycoris_config.json")
    if lycoris["algo"] == "diag-oft":
        assert "the adapters are lora, dora, loha and lokr" in _lines(result)["lycoris_config.json.algo"].note


def test_onetrainer_flux_samples_file_and_quantised_transformer(tmp_path: Path) -> None:
    """Nerogar/OneTrainer modules/util/config/SampleConfig.py (a sample definition file),
    TrainConfig.py's transformer part weight_dtype (modules/util/enum/DataType.py NFLOAT_4)."""
    source = DATA / "onetrainer_flux" / "config.json"
    result = import_config(source)
    data = strict(result.text, tmp_path)
    assert data["base_precision"] == "nf4" and data["sample_steps"] == 20
    assert data["sample_prompts"] == [
        {"prompt": "a photo of my-subject on a mountain", "width": 768, "height": 1024, "seed": 42, "guidance": 3.5},
        {"prompt": "my-subject as a watercolour painting", "width": 768, "height": 768, "guidance": 3.5},
    ]  # fmt: skip  # the second's random seed and negative prompt named; the third is disabled
    lines = _lines(result)
    assert lines["samples.json[1].negative_prompt"].outcome == "not carried"
    assert lines["samples.json[2]"].note.endswith("a disabled sample")
    every_leaf_reported(json.loads(source.read_text()), result.lines)
    every_leaf_reported(
        json.loads((source.parent / "samples.json").read_text()), result.lines, "samples.json"
    )


@pytest.mark.parametrize(
    ("weight", "train", "want", "said"),
    [
        ("FLOAT_16", "FLOAT_16", "fp16", None),
        ("BFLOAT_16", "BFLOAT_16", "bf16", None),
        ("FLOAT_8", "BFLOAT_16", "int8", None),
        ("INT_8", None, "int8", None),
        ("FLOAT_32", "BFLOAT_16", None, "the compute one is taken"),
        (None, "BFLOAT_16", None, "base_precision auto computes in bf16"),  # before: "not supported: 'Bfp16'"
        ("GGUF", None, None, "GGUF"),
    ],
)
def test_onetrainer_weight_and_train_dtypes(tmp_path: Path, weight, train, want, said) -> None:
    doc = json.loads((DATA / "onetrainer_sdxl.json").read_text())
    doc.pop("weight_dtype"), doc.pop("train_dtype")
    if weight is not None:
        doc["unet"] = {"weight_dtype": weight}
    if train is not None:
        doc["train_dtype"] = train
    path = tmp_path / "ot.json"
    path.write_text(json.dumps(doc))
    result = import_config(path)
    data = strict(result.text, tmp_path)
    assert data.get("base_precision") == want
    if said is not None:
        assert any(said in line.note for line in result.lines if line.outcome == "not carried"), result.lines


def test_simpletuner_side_files_of_its_documented_layout_are_found(tmp_path: Path) -> None:
    """SimpleTuner reads data_backend_config and lycoris_config against its working folder, its
    config in config/ ("config/lycoris_config.json": documentation/LYCORIS.md, the examples'
    "config/examples/multidatabackend-....json"): before, the import was refused, the files
    looked for in config/config/."""
    root = tmp_path / "SimpleTuner"
    (root / "config").mkdir(parents=True)
    source = DATA / "simpletuner_lokr"
    doc = json.loads((source / "config.json").read_text())
    doc |= {
        "data_backend_config": "config/multidatabackend.json",
        "lycoris_config": "config/lycoris_config.json",
    }
    (root / "config" / "config.json").write_text(json.dumps(doc))
    for name in ("multidatabackend.json", "lycoris_config.json"):
        (root / "config" / name).write_text((source / name).read_text())
    result = import_config(root / "config" / "config.json")
    data = strict(result.text, tmp_path)
    assert data["adapter"] == "lokr" and data["datasets"] == [
        {"path": "/data/datasets/my-subject", "repeats": 5}
    ]
    assert _lines(result)["lycoris_config"].value == str(root / "config" / "lycoris_config.json")


def test_onetrainer_side_files_of_its_working_folder_are_found(tmp_path: Path) -> None:
    """OneTrainer's presets live in training_presets/ and name training_concepts/concepts.json and
    training_samples/samples.json of its working folder (TrainConfig.py's defaults)."""
    root = tmp_path / "OneTrainer"
    for folder in ("training_presets", "training_concepts", "training_samples"):
        (root / folder).mkdir(parents=True)
    doc = json.loads((DATA / "onetrainer_flux" / "config.json").read_text())
    concepts = doc.pop("concepts")
    doc |= {
        "concept_file_name": "training_concepts/concepts.json",
        "sample_definition_file_name": "training_samples/samples.json",
    }
    (root / "training_presets" / "flux.json").write_text(json.dumps(doc))
    (root / "training_concepts" / "concepts.json").write_text(json.dumps(concepts))
    (root / "training_samples" / "samples.json").write_text(
        (DATA / "onetrainer_flux" / "samples.json").read_text()
    )
    data = strict(import_config(root / "training_presets" / "flux.json").text, tmp_path)
    assert data["datasets"][0]["path"] == "/data/concepts/flux-subject" and len(data["sample_prompts"]) == 2


def test_a_side_file_above_is_not_taken_from_a_folder_others_can_write(tmp_path: Path) -> None:
    """The lookup above the config stops at a folder anyone can write (a shared /tmp): before, a
    config in /tmp/run/ whose data_backend_config was missing read another user's
    /tmp/multidatabackend.json, its datasets carried as the run's."""
    from lorastudio.errors import ConfigError

    shared = tmp_path / "shared"
    (shared / "run").mkdir(parents=True)
    source = DATA / "simpletuner_lokr"
    (shared / "run" / "config.json").write_text((source / "config.json").read_text())
    (shared / "run" / "lycoris_config.json").write_text((source / "lycoris_config.json").read_text())
    planted = [{"id": "x", "type": "local", "instance_data_dir": "/someone/elses", "repeats": 0}]
    (shared / "multidatabackend.json").write_text(json.dumps(planted))
    shared.chmod(0o1777)  # as /tmp
    try:
        with pytest.raises(ConfigError, match=r"run/multidatabackend.json: No such file"):
            import_config(shared / "run" / "config.json")
        shared.chmod(0o755)  # the user's own folder: read, as SimpleTuner's working folder
        assert "/someone/elses" in import_config(shared / "run" / "config.json").text
    finally:
        shared.chmod(0o755)


def test_a_side_file_s_unknown_keys_are_reported_though_its_name_starts_with_a_key(tmp_path: Path) -> None:
    """lycoris_config.json's and samples.json's keys were matched against every line by text, so
    the config's own "lycoris_config" / "samples" lines read as holding "lycoris_config.json.x" /
    "samples.json[0].x": before, a key of either file the importer does not know had no line."""
    for name, edit in (("simpletuner_lokr", "lycoris_config.json"), ("onetrainer_flux", "samples.json")):
        folder = tmp_path / name
        folder.mkdir()
        for file in (DATA / name).iterdir():
            (folder / file.name).write_text(file.read_text())
        doc = json.loads((folder / edit).read_text())
        (doc[0] if isinstance(doc, list) else doc)["mystery_key"] = 7
        (folder / edit).write_text(json.dumps(doc))
        lines = _lines(import_config(folder / "config.json"))
        key = f"{edit}[0].mystery_key" if isinstance(doc, list) else f"{edit}.mystery_key"
        assert lines[key].outcome == "not carried" and "not read" in lines[key].note


def test_a_file_of_many_keys_and_lines_is_reported_in_a_blink(tmp_path: Path) -> None:
    """Every leaf was compared with every line: 20 000 OneTrainer samples (each a line, each key a
    leaf) took minutes; now sorted lookups (report._unnamed)."""
    from lorastudio.config_import.report import _unnamed

    found = [f"samples[{i}].{k}" for i in range(20_000) for k in ("prompt", "seed", "x")] + ["a", "b.c"]
    named = [f"samples[{i}].prompt" for i in range(20_000)] + [
        f"samples[{i}].seed" for i in range(0, 20_000, 2)
    ]
    named += ["a.b", "b"]  # "a" holds a line's key; "b.c" is inside one
    left = _unnamed(found, named)
    assert len(left) == 20_000 + 10_000 and "a" not in left and "b.c" not in left
    assert left[:3] == ["samples[0].x", "samples[1].seed", "samples[1].x"]


@pytest.mark.parametrize(
    ("value", "rank", "note"),
    [(1, 1024, None), ("true", 1024, None), ("yes", 8, "'yes' is not true or false"), (0, 8, "off")],
)
def test_a_lokr_full_matrix_switch_is_read_as_lycoris_reads_it(tmp_path: Path, value, rank, note) -> None:
    """`full_matrix: 1` (LyCORIS: on) was reported "not needed here: lokr only" of a LoKr and
    the rank of linear_dim taken: the full matrix silently lost."""
    folder = tmp_path / "st"
    folder.mkdir()
    for file in (DATA / "simpletuner_lokr").iterdir():
        (folder / file.name).write_text(file.read_text())
    (folder / "lycoris_config.json").write_text(
        json.dumps({"algo": "lokr", "linear_dim": 8, "linear_alpha": 4, "full_matrix": value})
    )
    result = import_config(folder / "config.json")
    assert strict(result.text, tmp_path)["lora_rank"] == rank
    line = _lines(result).get("lycoris_config.json.full_matrix")
    assert (line.ours in ("lora_rank", "lora_alpha")) if note is None else note in line.note


def test_one_bad_onetrainer_sample_drops_its_own_value_not_every_prompt(tmp_path: Path) -> None:
    """A sample of width 10^9 (or a prompt with an ESC) made the strict config refuse
    sample_prompts whole: every good prompt lost, each reported "less than or equal to 2048"."""
    folder = tmp_path / "ot"
    folder.mkdir()
    (folder / "config.json").write_text((DATA / "onetrainer_flux" / "config.json").read_text())
    samples = [{"prompt": "good", "seed": 1}, {"prompt": "a\x1b[31mred"}, {"prompt": "wide", "width": 10**9}]
    (folder / "samples.json").write_text(json.dumps(samples))
    result = import_config(folder / "config.json")
    assert strict(result.text, tmp_path)["sample_prompts"] == [
        {"prompt": "good", "seed": 1},
        {"prompt": "wide"},
    ]
    lines = _lines(result)
    assert "U+001B" in lines["samples.json[1]"].note
    assert (
        "width = 1000000000: Input should be less than or equal to 2048"
        in lines["samples.json[2].width"].note
    )


def test_one_bad_ai_toolkit_prompt_drops_its_own_option_not_every_prompt(tmp_path: Path) -> None:
    """The same for ai-toolkit: one prompt's `--w 100000` or ESC refused every sample prompt."""
    doc = _yaml_doc(DATA / "ai-toolkit_flux.yaml")
    doc["config"]["process"][0]["sample"]["prompts"] = ["good", "bad --w 100000", "esc \x1b[31m red"]
    path = tmp_path / "a.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = import_config(path)
    prompts = strict(result.text, tmp_path)["sample_prompts"]
    assert [p["prompt"] for p in prompts] == ["good", "bad"] and prompts[1]["width"] == 1024
    lines = _lines(result)
    assert "width = 100000" in lines["config.process[0].sample.prompts[1] --w"].note
    assert "U+001B" in lines["config.process[0].sample.prompts[2]"].note


def _yaml_doc(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def test_one_bad_kohya_prompt_line_drops_its_own_option_and_a_file_not_utf8_is_named(tmp_path: Path) -> None:
    """kohya's prompt file: the same whole refusal; and a file not UTF-8 was read with U+FFFD."""
    for name in ("kohya_flux.toml", "kohya_dataset.toml"):
        (tmp_path / name).write_text((DATA / name).read_text())
    (tmp_path / "kohya_prompts.txt").write_text("good --w 512\nbad --w 100000\nesc \x1b[31m red\n")
    result = import_config(tmp_path / "kohya_flux.toml")
    assert strict(result.text, tmp_path)["sample_prompts"] == [{"prompt": "good", "width": 512}, "bad"]
    assert "U+001B" in _lines(result)["sample_prompts[kohya_prompts.txt line 3]"].note
    (tmp_path / "kohya_prompts.txt").write_bytes(b"caf\xe9\n")
    with pytest.raises(ConfigError, match="kohya_prompts.txt is not UTF-8 text: byte 0xe9"):
        import_config(tmp_path / "kohya_flux.toml")
