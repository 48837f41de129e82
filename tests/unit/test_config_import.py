"""`lorastudio config import`: the peers' documented example configs (tests/data/peer_configs/,
each naming its source) become run configs the strict config accepts, with every peer setting
reported; hostile or broken files are refused naming the file and key. In-process, no torch."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest
from tests.cli_runner import run_cli_streams

from lorastudio.config_import import import_config
from lorastudio.errors import ConfigError
from peer_config_checks import DATA, every_leaf_reported, strict


def test_ai_toolkit_flux_example(tmp_path: Path) -> None:
    result = import_config(DATA / "ai-toolkit_flux.yaml")
    assert result.kind == "ai-toolkit"
    data = strict(result.text, tmp_path)
    assert data["family"] == "flux" and data["base_model"] == "black-forest-labs/FLUX.1-dev"
    assert (data["lora_rank"], data["lora_alpha"], data["learning_rate"]) == (
        16,
        16,
        1e-4,
    )  # lr: YAML's "1e-4" text
    assert (data["optimizer"], data["steps"], data["ema_decay"], data["save_lora_every"]) == (
        "adamw8bit",
        2000,
        0.99,
        250,
    )
    assert data["resolution"] == [512, 768, 1024]
    assert data["datasets"] == [
        {"path": "/data/images/person", "caption_dropout": 0.05, "shuffle_tags": False}
    ]
    prompts = data["sample_prompts"]
    assert len(prompts) == 8 and prompts[0]["prompt"].startswith(
        "p3r5on reading a newspaper"
    )  # [trigger] replaced
    assert [p["seed"] for p in prompts] == list(range(42, 50))  # walk_seed
    by_peer = {line.peer: line for line in result.lines}
    assert by_peer["config.process[0].sample.prompts[9]"].outcome == "not carried"  # 10 prompts, 8 here
    assert by_peer["config.process[0].model.quantize"].outcome == "changed"
    assert "bf16" in by_peer["config.process[0].train.dtype"].note
    every_leaf_reported(_yaml(DATA / "ai-toolkit_flux.yaml"), result.lines)


def _yaml(path: Path) -> object:
    import yaml

    return yaml.safe_load(path.read_text(encoding="utf-8"))


def test_kohya_flux_example_with_its_dataset_config_and_prompt_file(tmp_path: Path) -> None:
    result = import_config(DATA / "kohya_flux.toml")
    assert result.kind == "kohya"
    data = strict(result.text, tmp_path)
    assert (data["family"], data["lora_rank"], data["num_epochs"], data["batch_size"]) == ("flux", 8, 6, 2)
    assert (data["timestep_sampling"], data["flow_shift"], data["base_precision"]) == (
        "sigmoid",
        3.0,
        "int8",
    )
    assert data["datasets"] == [
        {
            "path": "/data/train/sks_dog",
            "shuffle_tags": True,
            "keep_tokens": 1,
            "default_caption": "sks dog",
            "repeats": 10,
        },
        {
            "path": "/data/reg/dog",
            "shuffle_tags": True,
            "keep_tokens": 0,
            "regularisation": True,
            "default_caption": "dog",
        },
    ]
    assert data["sample_prompts"][0] == {
        "prompt": "a tabby cat asleep on a windowsill, afternoon sun",
        "width": 768, "height": 768, "seed": 1, "guidance": 7.5,
    }  # fmt: skip
    every_leaf_reported(tomllib.loads((DATA / "kohya_flux.toml").read_text()), result.lines)
    every_leaf_reported(
        tomllib.loads((DATA / "kohya_dataset.toml").read_text()), result.lines, "kohya_dataset.toml"
    )


def test_kohya_folders_reg_and_settings_the_strict_config_refuses(tmp_path: Path) -> None:
    """train_data_dir's N_name folders read in place, the reg folder a regularisation entry; a
    value out of our range (rank 2048) and a setting the family cannot honour (noise_offset on
    FLUX.1) are reported as not carried with the strict config's reason, the rest written."""
    path = tmp_path / "kohya.json"
    path.write_text(json.dumps({
        "pretrained_model_name_or_path": "black-forest-labs/FLUX.1-dev", "network_module": "networks.lora_flux",
        "train_data_dir": "img", "reg_data_dir": "/data/reg", "network_dim": 2048, "noise_offset": 0.05,
        "max_grad_norm": 0, "resolution": "1024,768", "optimizer_type": "CAME", "some_new_flag": True, "vae": "",
    }))  # fmt: skip
    result = import_config(path, toml=False)
    data = strict(result.text, tmp_path, ".json")
    assert data["kohya_folders"] is True and data["max_grad_norm"] is None  # JSON keeps null (off)
    assert data["datasets"] == [
        {"path": str(tmp_path / "img")},
        {"path": "/data/reg", "regularisation": True},
    ]
    assert data["resolution"] == 896  # the square of 1024 x 768's area, to 64
    by_peer = {line.peer: line for line in result.lines}
    assert "lora_rank" not in data and by_peer["network_dim"].outcome == "not carried"
    assert "refused here" in by_peer["network_dim"].note
    assert "flux family cannot honour" in by_peer["noise_offset"].note
    assert by_peer["optimizer_type"].note.startswith("not supported here")
    assert by_peer["some_new_flag"].note.startswith("not read")  # unknown: reported, not dropped
    assert by_peer["vae"].note.startswith("not needed here: unset")
    toml = import_config(path)  # TOML has no null: said, not written
    assert "max_grad_norm" not in tomllib.loads(toml.text)
    assert "--set max_grad_norm=null" in {line.peer: line for line in toml.lines}["max_grad_norm"].note


def test_a_setting_off_that_toml_cannot_hold_is_said_in_the_file(tmp_path: Path) -> None:
    # kohya SDXL's min_snr_gamma = 0 (off) imported to a .toml left snr_gamma out, and the file
    # trained at min-SNR 5 with no word in it; its line said "refused here" (session 39 journey4)
    path = tmp_path / "sdxl.toml"
    path.write_text('pretrained_model_name_or_path = "/models/sdxl.safetensors"\nnetwork_module = "networks.lora"\n'
                    'train_data_dir = "/data/img"\nmin_snr_gamma = 0\n')  # fmt: skip
    result = import_config(path, family="sdxl")
    assert "snr_gamma" not in tomllib.loads(result.text)
    assert "# off in the imported config (null), which TOML cannot write: snr_gamma\n" in result.text
    assert "`--set snr_gamma=null`" in result.text.split("\n", 4)[3]
    note = {line.peer: line for line in result.lines}["min_snr_gamma"].note
    assert note.startswith("left out of the .toml, not refused") and "--set snr_gamma=null" in note


def test_family_is_asked_for_never_guessed(tmp_path: Path) -> None:
    path = tmp_path / "sd.toml"
    path.write_text('pretrained_model_name_or_path = "/models/my_model.safetensors"\nnetwork_module = "networks.lora"\n'
                    'train_data_dir = "/data/img"\n')  # fmt: skip
    with pytest.raises(ConfigError, match="pass --family"):
        import_config(path)
    data = strict(import_config(path, family="sdxl").text, tmp_path)
    assert data["family"] == "sdxl"
    with pytest.raises(ConfigError, match="unknown model family 'sd15'"):
        import_config(path, family="sd15")


def test_format_detection_refuses_naming_the_candidates(tmp_path: Path) -> None:
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps({"network_dim": 4, "model_family": "flux", "training_method": "LORA"}))
    with pytest.raises(ConfigError, match="could be kohya, simpletuner, onetrainer: say which with --from"):
        import_config(path)
    path.write_text(json.dumps({"hello": 1}))
    with pytest.raises(ConfigError, match="none of the formats read here"):
        import_config(path)


@pytest.mark.parametrize(
    ("name", "body", "said"),
    [
        (
            "bomb.yaml",
            "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(
                f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n"
                for p, c in zip("abcdefg", "bcdefgh", strict=True)
            ),
            "alias bomb",
        ),
        ("loop.yaml", "a: &a [1, *a]\n", "alias of a node inside that node"),
        ("bytes.yaml", b"config:\n  name: \xff\xfe\n", "not UTF-8 text: byte 0xff at line 2, column 9"),
        ("list.yaml", "- a\n- b\n", "not a table of settings"),
        ("object.yaml", "a: !!python/object:os.system {}\n", "cannot read object.yaml"),
        ("deep.json", "[" * 40 + "]" * 40, "nests tables or lists deeper than 32"),
        ("run.ini", "x", "a .yaml, .yml, .toml or .json file"),
    ],
)
def test_hostile_files_are_refused_naming_the_file(
    tmp_path: Path, name: str, body: str | bytes, said: str
) -> None:
    path = tmp_path / name
    path.write_bytes(body if isinstance(body, bytes) else body.encode())
    with pytest.raises(ConfigError, match=said.replace("(", r"\(").replace(")", r"\)")):
        import_config(path, "ai-toolkit" if name.endswith(".yaml") else None)


def test_a_huge_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("wb") as fh:
        fh.truncate(50 * 1024 * 1024)  # sparse: 50 MB on no disk
    with pytest.raises(ConfigError, match="huge.yaml is 52428800 bytes"):
        import_config(path)


def test_a_path_with_dotdot_is_refused_naming_the_file_and_key(tmp_path: Path) -> None:
    shutil.copy(DATA / "ai-toolkit_flux.yaml", tmp_path / "job.yaml")
    text = (tmp_path / "job.yaml").read_text().replace("/data/images/person", "../../etc")
    (tmp_path / "job.yaml").write_text(text)
    with pytest.raises(ConfigError) as err:
        import_config(tmp_path / "job.yaml")
    (problem,) = err.value.problems
    assert problem.field == "job.yaml: config.process[0].datasets[0].folder_path"
    assert "'..'" in problem.message
    kohya = tmp_path / "k.toml"
    kohya.write_text('network_module = "networks.lora_flux"\ndataset_config = "../secret.toml"\n')
    with pytest.raises(
        ConfigError, match=r"k.toml: dataset_config: '../secret.toml' is not a path without '..'"
    ):
        import_config(kohya)


def test_cli_writes_a_new_file_and_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run.toml"
    code, stdout, _ = run_cli_streams(capsys, monkeypatch, "config", "import", str(DATA / "ai-toolkit_flux.yaml"),
                                      "--out", str(out))  # fmt: skip
    assert code == 0, stdout
    assert "carried      config.process[0].train.lr -> learning_rate = 0.0001" in stdout
    assert "not carried  config.process[0].save.push_to_hub: not needed here" in stdout
    strict(out.read_text(), tmp_path)
    code, _, stderr = run_cli_streams(capsys, monkeypatch, "config", "import", str(DATA / "ai-toolkit_flux.yaml"),
                                      "--out", str(out))  # fmt: skip
    assert code == 2 and "already exists" in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.toml"]  # no staging left
    code, stdout, _ = run_cli_streams(
        capsys, monkeypatch, "config", "import", str(DATA / "kohya_flux.toml"), "--json"
    )
    assert code == 0 and json.loads(stdout)["from"] == "kohya"


def test_simpletuner_flux_example_with_its_backends(tmp_path: Path) -> None:
    result = import_config(DATA / "simpletuner" / "config.json")
    assert result.kind == "simpletuner"
    data = strict(result.text, tmp_path)
    assert (data["family"], data["base_model"], data["steps"], data["flow_shift"]) == (
        "flux", "black-forest-labs/FLUX.1-dev", 1200, 3,
    )  # fmt: skip
    assert data["datasets"] == [{"path": "/data/datasets/my-subject", "repeats": 5}]
    assert data["sample_prompts"][0]["width"] == 1024
    every_leaf_reported(json.loads((DATA / "simpletuner" / "config.json").read_text()), result.lines)


def test_onetrainer_sdxl_preset(tmp_path: Path) -> None:
    result = import_config(DATA / "onetrainer_sdxl.json")
    assert result.kind == "onetrainer"
    data = strict(result.text, tmp_path)
    assert (data["family"], data["optimizer"], data["num_epochs"], data["noise_offset"]) == (
        "sdxl",
        "adamw8bit",
        60,
        0.04,
    )
    assert data["datasets"] == [{"path": "/data/concepts/my-subject", "repeats": 8, "loss_weight": 1.0}]
    by_peer = {line.peer: line for line in result.lines}
    assert by_peer["sample_after"].note.startswith("not supported here")  # minutes: not a step count
    every_leaf_reported(json.loads((DATA / "onetrainer_sdxl.json").read_text()), result.lines)


def test_a_schedule_the_strict_config_names_otherwise_and_a_combination_it_refuses(tmp_path: Path) -> None:
    """kohya's cosine_with_restarts of one cycle (its default) is our cosine schedule (changed, said);
    a warmup longer than the run, a cadence past its end and a sample cadence without prompts are
    taken out with the strict config's reason, naming the peer key; the rest is written."""
    path = tmp_path / "k.json"
    path.write_text(json.dumps({
        "pretrained_model_name_or_path": "black-forest-labs/FLUX.1-dev", "network_module": "lycoris.kohya",
        "network_args": ["algo=lokr", "factor=4"], "train_data_dir": "/data/img", "lr_scheduler": "cosine_with_restarts",
        "lr_warmup_steps": 100, "max_train_steps": 50, "save_every_n_steps": 100, "sample_every_n_steps": 500,
    }))  # fmt: skip
    result = import_config(path, family="flux")
    data = strict(result.text, tmp_path)
    assert (data["lr_scheduler"], data["adapter"], data["lokr_factor"], data["steps"]) == (
        "cosine",
        "lokr",
        4,
        50,
    )
    by_peer = {line.peer: line for line in result.lines}
    assert by_peer["lr_scheduler"].outcome == "changed"
    for key in ("lr_warmup_steps", "save_every_n_steps", "sample_every_n_steps"):
        assert by_peer[key].outcome == "not carried" and by_peer[key].note.startswith("refused here"), key


def test_musubi_tuner_qwen_image_example(tmp_path: Path) -> None:
    """musubi-tuner's DiT file is refused as the base (lorastudio reads single files of SDXL, FLUX.1
    and Chroma only: `train --check` would refuse it), naming the file and key; with --base-model
    its network module is the family, its dataset config's image_directory an entry and its
    [960, 544] resolution the side of a square of that area."""
    with pytest.raises(ConfigError) as err:
        import_config(DATA / "musubi_qwen_image.toml")
    (problem,) = err.value.problems
    assert problem.field == "musubi_qwen_image.toml: dit" and "pass --base-model" in problem.message
    result = import_config(DATA / "musubi_qwen_image.toml", base="Qwen/Qwen-Image")
    data = strict(result.text, tmp_path)
    assert (data["family"], data["base_model"]) == ("qwen-image", "Qwen/Qwen-Image")
    assert (data["resolution"], data["flow_shift"], data["num_epochs"]) == (704, 2.2, 12)
    assert data["datasets"] == [{"path": "/data/image_dir"}]
    every_leaf_reported(tomllib.loads((DATA / "musubi_dataset.toml").read_text(encoding="utf-8")), result.lines,
                         "musubi_dataset.toml")  # fmt: skip


def test_ai_toolkit_zimage_turbo_example(tmp_path: Path) -> None:
    """Its DOP becomes the preservation table, its training adapter assistant_lora, Prodigy's
    optimizer_params their settings, samples: [{prompt}] sample prompts; ai-toolkit's weighted
    timesteps are named as not supported."""
    result = import_config(DATA / "ai-toolkit_zimage_turbo.yaml")
    data = strict(result.text, tmp_path)
    assert (data["family"], data["optimizer"], data["learning_rate"], data["weight_decay"]) == (
        "z-image",
        "prodigy",
        1.0,
        0.01,
    )
    assert data["preservation"] == {"class_word": "person", "weight": 1.0}
    assert data["assistant_lora"].startswith("ostris/zimage_turbo_training_adapter/")
    assert [p["prompt"] for p in data["sample_prompts"]][1] == "sks hiking on a mountain ridge"
    by_peer = {line.peer: line for line in result.lines}
    assert by_peer["config.process[0].train.timestep_type"].note.startswith("not supported here")
    every_leaf_reported(_yaml(DATA / "ai-toolkit_zimage_turbo.yaml"), result.lines)


def test_kohya_ss_gui_preset_with_a_windows_base(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The kohya_ss GUI's saved JSON: "" for unset and 0 for off (not needed), its own keys (epoch,
    max_resolution, LoRA_type, the LyCORIS fields at the top level), the prompt text itself in
    sample_prompts. Its Windows base path is not carried, so the import asks for --base-model."""
    path = DATA / "kohya_ss_gui_flux.json"
    code, _, stderr = run_cli_streams(capsys, monkeypatch, "config", "import", str(path))
    assert code == 2 and "base_model: the file names no base model: pass --base-model" in stderr
    result = import_config(path, base="/models/flux1-dev.safetensors")
    data = strict(result.text, tmp_path)
    assert (data["family"], data["resolution"], data["num_epochs"], data["lr_cycles"]) == ("flux", 768, 20, 4)
    assert (data["base_precision"], data["guidance"], data["kohya_folders"]) == ("int8", 3.0, True)
    assert data["sample_prompts"] == [
        {
            "prompt": "a portrait of an old fisherman, oil painting",
            "width": 1024,
            "height": 768,
            "guidance": 3.5,
        }
    ]
    by_peer = {line.peer: line for line in result.lines}
    assert "Windows path" in by_peer["pretrained_model_name_or_path"].note
    assert by_peer["save_every_n_steps"].note == "not needed here: 0 is unset"
    assert by_peer["huggingface_repo_id"].note.startswith("not needed here: unset in the file")
    assert data["timestep_sampling"] == "uniform"  # kohya's "sigma" with its default weighting_scheme
    every_leaf_reported(json.loads(path.read_text(encoding="utf-8")), result.lines)


def test_kohya_network_weights_become_init_lora(tmp_path: Path) -> None:
    """kohya's network_weights (train on from a LoRA) is carried as init_lora, a relative path
    taken against the file's folder (before init_lora: "a run starts from a fresh adapter"); a
    file not on this machine is carried as the image folders are, for the run's check to name."""
    from tests.hostile_loras import flux_lora_bytes

    (tmp_path / "prev.safetensors").write_bytes(flux_lora_bytes(rank=2))
    args = {
        "pretrained_model_name_or_path": "black-forest-labs/FLUX.1-dev", "network_module": "networks.lora_flux",
        "train_data_dir": "img", "network_weights": "prev.safetensors", "dim_from_weights": True,
    }  # fmt: skip
    path = tmp_path / "kohya.json"
    path.write_text(json.dumps(args))
    result = import_config(path, toml=False)
    data = strict(result.text, tmp_path, ".json")
    by_peer = {line.peer: line for line in result.lines}
    assert data["init_lora"] == str(tmp_path / "prev.safetensors")
    assert (
        by_peer["network_weights"].outcome == "changed" and "relative path" in by_peer["network_weights"].note
    )
    assert by_peer["dim_from_weights"].note.startswith("not needed here")

    path.write_text(json.dumps({**args, "network_weights": "/elsewhere/gone.safetensors"}))
    data = strict(import_config(path, toml=False).text, tmp_path, ".json")
    assert data["init_lora"] == "/elsewhere/gone.safetensors"


def test_a_non_text_network_weights_is_refused_as_no_file_path(tmp_path: Path) -> None:
    """kohya's network_weights is a file: `5` there was refused as "5 is not a folder path"
    (common.folder words every path key's refusal for a folder; session 37 kpfix6)."""
    path = tmp_path / "kohya.json"
    args = {"pretrained_model_name_or_path": "black-forest-labs/FLUX.1-dev", "network_module": "networks.lora_flux",
            "train_data_dir": "img", "network_weights": 5}  # fmt: skip
    path.write_text(json.dumps(args))
    with pytest.raises(ConfigError, match="network_weights: 5 is not a LoRA file path"):
        import_config(path, toml=False)
