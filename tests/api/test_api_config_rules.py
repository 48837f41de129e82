"""/api/info serves the config rules the web UI follows (lorastudio.config_choices, each family's
`refuses`), so the UI holds no copy of them: every rule served is the rule the config parser
applies. A family refuses exactly the family-specific settings it lists in `refuses` and accepts
the ones it `supports`; each choice of a select field accepts the settings served for it and
refuses every other choice's; a served null-means-off setting keeps an explicit null; the host
offers exactly the optimizers and compile modes its preflight accepts."""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

import pytest
from fastapi.testclient import TestClient

from lorastudio.config import FAMILY_SPECIFIC_FIELDS, TrainConfig, parse_train_config, resolve_train_config
from lorastudio.config_fields_runtime import AttentionBackend, CompileMode
from lorastudio.config_fields_training import OptimizerName
from lorastudio.errors import ConfigError
from lorastudio.settings import Settings

# A value for each setting below that asks for something (not its unset / default value).
VALUES: dict[str, Any] = {
    "snr_gamma": 4.0,
    "noise_offset": 0.05,
    "timestep_sampling": "uniform",
    "logit_mean": 0.5,
    "logit_std": 1.5,
    "flow_shift": 3.0,
    "guidance": 2.5,
    "max_sequence_length": 64,
    "train_text_encoder": True,
    "text_encoder_lr": 1e-5,
    "v_prediction": True,
    "optimizer_betas": [0.9, 0.99],
    "optimizer_eps": 1e-7,
    "prodigy_d_coef": 2.0,
    "prodigy_safeguard_warmup": True,
    "prodigy_use_bias_correction": True,
    "adafactor_relative_step": False,
    "adafactor_scale_parameter": True,
    "adafactor_warmup_init": False,
    "lokr_factor": 4,
    "lokr_decompose_both": True,
    "huber_c": 0.2,
    "huber_schedule": "snr",
    "lr_cycles": 3,
    "lr_power": 2.0,
}


def _problems(config: dict[str, Any]) -> dict[str, str]:
    """{field: message} of every problem parse_train_config finds in `config` (empty: accepted)."""
    try:
        parse_train_config({"base_model": "m", "data_dir": "d", **config})
    except ConfigError as err:
        return {p.field: p.message for p in err.problems}
    return {}


@pytest.fixture
def info(client: TestClient) -> dict[str, Any]:
    answer = client.get("/api/info")
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_each_family_refuses_exactly_what_info_says(info: dict[str, Any]) -> None:
    for family in info["families"]:
        name = family["name"]
        assert family["refuses"] and family["supports"], name
        assert not set(family["refuses"]) & set(family["supports"]), name
        assert sorted(family["refuses"] + family["supports"]) == sorted(FAMILY_SPECIFIC_FIELDS), name
        for field in family["refuses"]:  # refused (by the family, or by a rule it breaks alone)
            problems = _problems({"family": name, field: VALUES[field]})
            assert field in problems, (name, field, problems)
        for field in family["supports"]:
            problems = _problems({"family": name, field: VALUES[field]})
            assert "cannot honour" not in problems.get(field, ""), (name, field, problems)
    # the refused settings of one family are supported by another (else nothing would set them)
    every_supported = {f for family in info["families"] for f in family["supports"]}
    assert {f for family in info["families"] for f in family["refuses"]} <= every_supported


def test_each_choice_reads_the_settings_info_serves_and_refuses_the_others(info: dict[str, Any]) -> None:
    rules = info["config_rules"]["choice_settings"]
    assert set(rules) == {"optimizer", "adapter", "loss", "lr_scheduler"}
    for field, choices in rules.items():
        literal = TrainConfig.model_json_schema()["properties"][field]
        assert sorted(choices) == sorted(literal["enum"]), field  # every choice the config accepts
        settings = {s for own in choices.values() for s in own}
        for choice, own in choices.items():
            for setting in settings:
                base = {"family": "flux", field: choice, setting: VALUES[setting]}
                if field == "adapter":
                    base["lora_format"] = "kohya" if choice in ("loha", "lokr") else "diffusers"
                problems = _problems(base)
                if setting in own:
                    assert setting not in problems, (field, choice, setting, problems)
                else:
                    assert "ignored" in problems.get(setting, ""), (field, choice, setting, problems)


def test_null_means_off_settings_keep_an_explicit_null(info: dict[str, Any]) -> None:
    off = info["config_rules"]["null_means_off"]
    assert "max_grad_norm" in off and "snr_gamma" in off
    families = {f["name"]: f for f in info["families"]}
    for field in off:
        family = next(
            name for name, f in families.items() if field in f["supports"] or field not in f["refuses"]
        )
        resolved = resolve_train_config(
            parse_train_config({"family": family, "base_model": "m", "data_dir": "d", field: None})
        )
        assert getattr(resolved, field) is None, (family, field)
    # a setting not served as null-means-off takes the family default for an explicit null
    resolved = resolve_train_config(
        parse_train_config({"family": "flux", "base_model": "m", "data_dir": "d", "lora_rank": None})
    )
    assert resolved.lora_rank == families["flux"]["defaults"]["lora_rank"]


def test_the_host_offers_exactly_the_optimizers_and_compile_modes_its_preflight_accepts(
    client: TestClient,
    info: dict[str, Any],
    settings: Settings,
    sample_dataset: Path,
    flux_config: Callable[..., dict],
) -> None:
    """HostOut.optimizers / compile_modes / attention_backends: the Train form offers these (8-bit
    optimizers need CUDA and bitsandbytes, compile on and cuDNN need CUDA); the preflight refuses
    exactly the others here."""
    shutil.copytree(sample_dataset, settings.datasets_dir / "shapes")
    host = info["host"]
    assert (
        "adamw" in host["optimizers"]
        and "off" in host["compile_modes"]
        and "math" in host["attention_backends"]
    )
    listed = {
        "optimizer": "optimizers",
        "compile": "compile_modes",
        "attention_backend": "attention_backends",
    }
    choices = [("optimizer", o) for o in get_args(OptimizerName)]
    choices += [("compile", m) for m in get_args(CompileMode) if m != "wide"]  # wide: SDXL's only
    choices += [("attention_backend", b) for b in get_args(AttentionBackend)]
    for field, value in choices:
        answer = client.post("/api/train/preflight", json={"config": flux_config(**{field: value})})
        refused = answer.status_code == 400 and any(p["field"] == field for p in answer.json()["problems"])
        assert answer.status_code in (200, 400), answer.text
        offered = host[listed[field]]
        assert refused == (value not in offered), (field, value, answer.text)


def test_each_familys_served_attention_token_and_flip_rules_are_the_parsers(info: dict[str, Any]) -> None:
    """attention_backends_refused, max_sequence_length_max and refuses_on are the family rules
    the parser applies (they lived in hooks the web form could not read): a served value is
    refused with its field named, every other one accepted."""
    families = {f["name"]: f for f in info["families"]}
    assert families["chroma"]["attention_backends_refused"] == ["cudnn"]
    assert families["qwen-image-edit"]["refuses_on"] == ["random_flip"]
    assert {n for n, f in families.items() if f["max_sequence_length_max"] == 512} >= {
        "flux",
        "chroma",
        "flux2",
        "flux2-klein",
    }
    for name, family in families.items():
        for backend in get_args(AttentionBackend):
            problems = _problems({"family": name, "attention_backend": backend})
            refused = backend in family["attention_backends_refused"]
            assert ("attention_backend" in problems) == refused, (name, backend, problems)
        cap = family["max_sequence_length_max"]
        if "max_sequence_length" in family["supports"] and cap is not None:
            assert "max_sequence_length" not in _problems({"family": name, "max_sequence_length": cap})
            over = _problems({"family": name, "max_sequence_length": cap + 1})
            assert f"at most {cap} tokens" in over.get("max_sequence_length", ""), (name, over)
        for setting in ("random_flip",):
            problems = _problems({"family": name, setting: True})
            assert (setting in problems) == (setting in family["refuses_on"]), (name, setting, problems)


def test_the_host_refusals_come_with_the_configs_other_problems(
    client: TestClient, flux_config: Callable[..., dict]
) -> None:
    """An 8-bit optimizer / compile "on" on this CPU host was refused only once the config's other
    problems were fixed: one answer lists them all, each once."""
    config = flux_config(bogus=1, lora_rank=0, optimizer="lion8bit", compile="on")
    answer = client.post("/api/train/preflight", json={"config": config})
    assert answer.status_code == 400, answer.text
    fields = [p["field"] for p in answer.json()["problems"]]
    assert {"bogus", "lora_rank", "optimizer", "compile"} <= set(fields), fields
    assert len(fields) == len(set(fields)), fields


MISSING_TRACKERS = [n for n in ("tensorboard", "wandb") if importlib.util.find_spec(n) is None]


@pytest.mark.skipif(not MISSING_TRACKERS, reason="every tracker package is installed here")
def test_every_host_refusal_comes_with_the_configs_other_problems(
    client: TestClient, flux_config: Callable[..., dict]
) -> None:
    """num_gpus beyond this host's GPUs, memory_budget_gb / offload_blocks without CUDA and a
    report_to tracker whose package is missing were refused only once the config's other problems
    were fixed (a second answer): the preflight and the start list them all, each once, naming the
    field and the reason."""
    tracker = MISSING_TRACKERS[0]
    config = flux_config(
        bogus=1,
        lora_rank=0,
        num_gpus=3,
        batch_size=2,
        memory_budget_gb=8,
        offload_blocks=2,
        report_to=[tracker],
    )
    for route in ("/api/train/preflight", "/api/train/start"):
        answer = client.post(route, json={"config": config})
        assert answer.status_code == 400, answer.text
        problems = answer.json()["problems"]
        fields = [p["field"] for p in problems]
        assert len(fields) == len(set(fields)), (route, fields)
        said = {p["field"]: p["message"] for p in problems}
        assert {"bogus", "lora_rank"} <= set(said), (route, said)
        assert "needs 3 CUDA GPUs" in said["num_gpus"], said
        assert "does not divide by the 3 processes" in said["batch_size"], said  # num_gpus' own rule
        assert "measured on a CUDA GPU" in said["memory_budget_gb"], said
        assert "block swap" in said["offload_blocks"], said
        assert f"needs the {tracker} package" in said["report_to"], said
    # a host field whose value the schema refuses is reported once, by the schema
    bad = client.post("/api/train/preflight", json={"config": flux_config(lora_rank=0, num_gpus=0)})
    fields = [p["field"] for p in bad.json()["problems"]]
    assert fields.count("num_gpus") == 1 and "lora_rank" in fields, fields
