"""Another trainer's config given to `lorastudio train` (session 31 wild-data audit): named for
what it is, with the `[[datasets]]` entries of its folders (RELIABILITY 1004)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from lorastudio.cli.config_file import load_config_file
from lorastudio.config_datasets import DatasetEntry
from lorastudio.errors import ConfigError

KOHYA = """
[general]
shuffle_caption = true
keep_tokens = 1

[[datasets]]
resolution = 1024
batch_size = 2

  [[datasets.subsets]]
  image_dir = 'C:\\train\\img\\10_sks dog'
  class_tokens = "sks dog"
  num_repeats = 10

  [[datasets.subsets]]
  is_reg = true
  image_dir = "/train/reg/1_dog"
  class_tokens = "dog"
  caption_extension = ".txt"
"""


def _refusal(path: Path) -> str:
    with pytest.raises(ConfigError) as err:
        load_config_file(path)
    (problem,) = err.value.problems
    assert problem.field == "config"
    return problem.message


def test_a_kohya_dataset_config_is_named_and_its_subsets_given_as_entries(tmp_path: Path) -> None:
    """It was "family: Field required ... datasets.0.subsets: unknown setting ... general: unknown
    setting": six schema problems naming neither the file's kind nor what to write."""
    path = tmp_path / "dataset_config.toml"
    path.write_text(KOHYA)
    said = _refusal(path)
    assert said.startswith(
        "dataset_config.toml: a kohya sd-scripts dataset config ([general], [[datasets.subsets]])"
    )
    assert "Its captions are .caption files" in said  # kohya's default caption_extension, in the first subset
    entries = tomllib.loads(said.split("(add family, base_model and your training settings):\n", 1)[1])[
        "datasets"
    ]
    assert entries == [
        {"path": "C:\\train\\img\\10_sks dog", "repeats": 10, "default_caption": "sks dog", "keep_tokens": 1,
         "shuffle_tags": True},
        {"path": "/train/reg/1_dog", "default_caption": "dog", "keep_tokens": 1, "shuffle_tags": True,
         "regularisation": True},
    ]  # fmt: skip
    for entry in entries:  # each a valid lorastudio entry as printed
        DatasetEntry.model_validate(entry)


def test_simpletuner_and_onetrainer_files_are_named_with_their_folders(tmp_path: Path) -> None:
    """Each was "the top level must be an object of settings"."""
    backends = tmp_path / "multidatabackend.json"
    backends.write_text(
        json.dumps(
            [
                {
                    "id": "pics",
                    "type": "local",
                    "instance_data_dir": "/data/pics",
                    "caption_strategy": "textfile",
                },
                {"id": "text-embeds", "type": "local", "dataset_type": "text_embeds", "cache_dir": "/c"},
            ]
        )
    )
    said = _refusal(backends)
    assert said.startswith(
        "multidatabackend.json: SimpleTuner's multidatabackend.json, not a lorastudio run config"
    )
    assert tomllib.loads(said.split("as entries:\n", 1)[1]) == {"datasets": [{"path": "/data/pics"}]}

    concepts = tmp_path / "concepts.json"
    concepts.write_text(
        json.dumps(
            [
                {
                    "name": "a",
                    "path": "/data/a",
                    "balancing": 3.0,
                    "balancing_strategy": "REPEATS",
                    "image": {},
                },
                {"name": "b", "path": "/data/b", "enabled": False, "image": {}},
            ]
        )
    )
    said = _refusal(concepts)
    assert said.startswith("concepts.json: a OneTrainer concepts file")
    assert tomllib.loads(said.split("as entries:\n", 1)[1]) == {
        "datasets": [{"path": "/data/a", "repeats": 3}]
    }

    yaml = tmp_path / "train_lora.yaml"
    yaml.write_text("job: extension\n")
    assert "another trainer's YAML config is not read" in _refusal(yaml)


def test_a_hand_edited_kohya_config_of_odd_values_is_named_never_a_traceback(tmp_path: Path) -> None:
    """`subsets = 5` and TOML's `inf` repeats (iterating an int, int(inf)) raised TypeError /
    OverflowError out of the check before it was bounded."""
    path = tmp_path / "odd.toml"
    path.write_text(
        '[general]\n[[datasets]]\nsubsets = 5\n[[datasets]]\n[[datasets.subsets]]\nimage_dir = "/x"\nnum_repeats = inf\n'
    )
    said = _refusal(path)
    assert said.startswith("odd.toml: a kohya sd-scripts dataset config")
    assert 'path = "/x"\nrepeats = "inf"' in said


@pytest.mark.parametrize(
    ("doc", "said"),
    [
        (
            {
                "--model_family": "flux",
                "--pretrained_model_name_or_path": "black-forest-labs/FLUX.1-dev",
                "--lora_rank": 16,
            },
            "SimpleTuner's config.json",
        ),
        (
            {
                "model_family": "flux",
                "pretrained_model_name_or_path": "black-forest-labs/FLUX.1-dev",
                "lora_rank": 16,
            },
            "SimpleTuner's config.json",
        ),
        (
            {"job": "extension", "config": {"name": "x", "process": [{"type": "sd_trainer"}]}},
            "an ai-toolkit job config",
        ),
    ],
)
def test_simpletuner_and_ai_toolkit_training_configs_are_named(tmp_path: Path, doc: dict, said: str) -> None:
    """RELIABILITY 1300: they were schema noise ("--model_family: unknown setting", "job: unknown
    setting"), or a SimpleTuner config without dashes was named a kohya training config."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    message = _refusal(path)
    assert message.startswith(f"config.json: {said}") and "lorastudio config import FILE" in message


def test_a_musubi_tuner_dataset_config_gives_its_folders(tmp_path: Path) -> None:
    """RELIABILITY 1301: musubi-tuner's [[datasets]] hold their image_directory themselves (no
    subsets): the file was named without a single entry, and one without [general] was schema
    noise ("datasets.0.path: Field required", "datasets.0.image_directory: unknown setting")."""
    for general in ('[general]\nresolution = [960, 544]\ncaption_extension = ".txt"\n\n', ""):
        path = tmp_path / "dataset.toml"
        path.write_text(general + '[[datasets]]\nimage_directory = "/data/imgs"\nnum_repeats = 2\n')
        said = _refusal(path)
        assert said.startswith("dataset.toml: a kohya sd-scripts dataset config")
        entries = tomllib.loads(said.split("your training settings):\n", 1)[1])["datasets"]
        assert entries == [{"path": "/data/imgs", "repeats": 2}]


def test_a_kohya_training_config_in_sections_is_named(tmp_path: Path) -> None:
    """RELIABILITY 2120: sd-scripts' `--config_file` in its sectioned form ([model_arguments],
    [training_arguments] ...: what `config import` reads, as README says) was "model_arguments:
    unknown setting" among "family: Field required" noise, where the flat form is named a kohya
    training config pointing at `lorastudio config import`."""
    path = tmp_path / "kohya.toml"
    path.write_text(
        '[model_arguments]\npretrained_model_name_or_path = "/models/sdxl.safetensors"\n\n'
        "[training_arguments]\nmax_train_steps = 100\n\n"
        '[additional_network_arguments]\nnetwork_module = "networks.lora"\nnetwork_dim = 16\n'
    )
    said = _refusal(path)
    assert said.startswith("kohya.toml: a kohya sd-scripts training config, not a lorastudio run config")
    assert "lorastudio config import FILE" in said
    # a lorastudio config with a stray table of that name stays the schema's to answer
    path.write_text('family = "flux"\n[training_arguments]\nmax_train_steps = 100\n')
    assert load_config_file(path)["training_arguments"] == {"max_train_steps": 100}
