"""The CLI names a problem as it was typed (session 36 messages, fixed in session 37 kpfix6):
`--device`'s refusals were named `device` (training/precision.pick_device, shared with the
engine), `datasets rename`'s `new name` (data/dataset_names.rename_dataset, shared with the API),
and a LoRA argument's tail after its last ':' that is no number was read as part of the path
("LoRA file not found: a.safetensors:x") where the part before it is a file (cli/lora_args)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_runner import run_cli
from lorastudio.cli.lora_args import parse_lora_arg
from lorastudio.errors import ConfigError
from lorastudio.settings import get_settings


def test_a_lora_argument_names_a_tail_that_is_no_number(tmp_path: Path) -> None:
    lora = tmp_path / "a.safetensors"
    lora.write_bytes(b"x")
    for field, number in (("--lora", "scale"), ("LORAS", "weight")):
        with pytest.raises(ConfigError) as info:
            parse_lora_arg(f"{lora}:x", field, number)
        assert [str(p) for p in info.value.problems] == [
            f"{field}: '{lora}:x': the {number} 'x' after the last ':' is not a number"
        ]
    (tmp_path / "b:x").write_bytes(b"x")  # a file whose name has the colon is still that file
    assert parse_lora_arg(f"{tmp_path}/b:x") == (tmp_path / "b:x", 1.0)
    assert parse_lora_arg(f"{tmp_path}/gone:x") == (tmp_path / "gone:x", 1.0)  # found missing later
    run = get_settings().outputs_dir / "foo"  # a run's name, as generate --lora takes it
    run.mkdir(parents=True)
    (run / "foo.safetensors").write_bytes(b"x")
    with pytest.raises(ConfigError, match="the scale 'abc' after the last ':' is not a number"):
        parse_lora_arg("foo:abc", outputs=get_settings().outputs_dir)


def test_the_cli_names_device_and_rename_problems_as_typed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    out = tmp_path / "a.png"
    code, said = run_cli(capsys, monkeypatch, "generate", "--base", "nothing", "--prompt", "x", "--out", str(out),
                         "--device", "tpu")  # fmt: skip
    assert code == 2 and "--device: unknown device 'tpu'" in said and "--base" in said, said
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"family": "flux", "base_model": "nothing", "data_dir": "nothing"}))
    code, said = run_cli(capsys, monkeypatch, "train", str(config), "--check", "--device", "tpu")
    assert code == 2 and "--device: unknown device 'tpu'" in said and "data_dir" in said, said
    datasets = get_settings().ensure_dirs().datasets_dir
    (datasets / "pets").mkdir()
    (datasets / "cats").mkdir()
    code, said = run_cli(capsys, monkeypatch, "datasets", "rename", "pets", "cats")
    assert code == 2 and "TO: a dataset named 'cats' already exists" in said, said
    code, said = run_cli(capsys, monkeypatch, "datasets", "rename", "pets", "a/b")
    assert code == 2 and said.startswith("error: TO: "), said
