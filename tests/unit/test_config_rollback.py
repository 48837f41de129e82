"""What this version writes of a config reads back in the version before it (session 35's start,
whose TrainConfig forbids keys it does not know): a setting newer than it, left null, is left out
of every dump (records, checkpoints' config and identity, sidecars, the config download), and the
API's answers still carry it (RELIABILITY 1330)."""

from __future__ import annotations

import json

from lorastudio.api.schemas_runs import TrainConfigOut
from lorastudio.config import TrainConfig
from lorastudio.training.resume.identity import identity_problems


def _config(**extra: object) -> TrainConfig:
    return TrainConfig(family="flux", base_model="/m", data_dir="/d", output_name="a", **extra)


def test_a_null_newer_setting_is_left_out_of_what_a_config_writes() -> None:
    cfg = _config()
    for dumped in (cfg.model_dump(), cfg.model_dump(mode="json"), json.loads(cfg.model_dump_json())):
        assert not {"init_lora"} & set(dumped), sorted(dumped)
    assert TrainConfig.model_validate(cfg.model_dump(mode="json")) == cfg  # read back the same
    started = _config(init_lora="done32")  # a run that uses it writes it (the old code refuses it)
    assert started.model_dump(mode="json")["init_lora"] == "done32"
    assert (
        TrainConfigOut.model_validate(cfg.model_dump(mode="json")).model_dump(mode="json")["init_lora"]
        is None
    )


def test_a_checkpoint_that_recorded_it_as_null_still_resumes() -> None:
    saved = {"init_lora": None, "lora_rank": 4}  # an identity written before it was left out
    assert identity_problems(saved, {"lora_rank": 4}) == []
    assert [
        p.field for p in identity_problems({"init_lora": "x.safetensors", "lora_rank": 4}, {"lora_rank": 4})
    ] == ["init_lora"]
