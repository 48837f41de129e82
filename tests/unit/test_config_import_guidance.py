"""A peer config's sample guidance that a run of its family refuses is not carried (RELIABILITY
1811): ai-toolkit's Qwen-Image example sets `sample.guidance_scale: 3`, which a Qwen-Image sample
prompt cannot honour (its true CFG needs a negative prompt; fix 1683 refuses it), so the imported
config was refused by its first `train --check`."""

from __future__ import annotations

from pathlib import Path

import pytest

from lorastudio.config_import import import_config

JOB = """job: extension
config:
  name: my_lora
  process:
    - type: sd_trainer
      trigger_word: sks
      network: {{type: lora, linear: 16, linear_alpha: 16}}
      datasets: [{{folder_path: {data}, caption_ext: txt, resolution: [1024]}}]
      train: {{batch_size: 1, steps: 100, lr: 0.0001}}
      model: {{name_or_path: {base}, arch: {arch}}}
      sample:
        sample_every: 50
        prompts: ["a sks dog", "a sks cat --cfg 5"]
        guidance_scale: {scale}
"""


def _imported(tmp_path: Path, base: str, arch: str, scale: float):
    (tmp_path / "data").mkdir(exist_ok=True)
    path = tmp_path / "job.yaml"
    path.write_text(JOB.format(data=tmp_path / "data", base=base, arch=arch, scale=scale), encoding="utf-8")
    return import_config(path)


def test_a_qwen_image_sample_guidance_is_not_carried_saying_why(tmp_path: Path) -> None:
    got = _imported(tmp_path, "Qwen/Qwen-Image", "qwen_image", 3)
    prompts = got.settings["sample_prompts"]
    assert [p["prompt"] for p in prompts] == ["a sks dog", "a sks cat"]  # the prompts stay
    assert all("guidance" not in p for p in prompts), prompts
    dropped = {line.peer: line.note for line in got.lines if line.outcome == "not carried"}
    for peer, scale in (("guidance_scale", "3"), ("prompts[1] --cfg", "5")):
        note = dropped.get(f"config.process[0].sample.{peer}", "")
        assert note.startswith(f"not supported here: {scale}: ") and "negative prompt" in note, (
            peer,
            dropped,
        )


@pytest.mark.parametrize(("base", "arch", "scale"), [("black-forest-labs/FLUX.1-dev", "flux", 3.5)])
def test_another_familys_sample_guidance_is_carried(
    tmp_path: Path, base: str, arch: str, scale: float
) -> None:
    prompts = _imported(tmp_path, base, arch, scale).settings["sample_prompts"]
    assert [p.get("guidance") for p in prompts] == [scale, 5], prompts
