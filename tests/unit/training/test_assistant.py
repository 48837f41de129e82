"""The assistant LoRA of a step-distilled base (TrainConfig.assistant_lora, training/adapters/assistant.py)
on the tiny Z-Image: merged into the frozen base for training, absent from the saved LoRA,
recorded in the sidecar, refused for a base that is not (or not known to be) distilled."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from lorastudio import families
from lorastudio.config import TrainConfig, parse_train_config
from lorastudio.errors import ConfigError
from lorastudio.lora.convert import to_kohya
from lorastudio.lora.files import write_lora_file
from lorastudio.training.adapters.assistant import merge_assistant
from lorastudio.training.loop import train

FAMILY = "z-image"
ASSISTANT_RANK, ASSISTANT_ALPHA = 2, 4.0
ASSISTANT_LAYERS = [f"layers.{i}.attention.{p}" for i in range(2) for p in ("to_q", "to_v")]


def _marked_copy(tiny: Path, root: Path, repo_id: str) -> Path:
    """A copy of the tiny Z-Image that says it is the hub repo `repo_id` (a fetched folder)."""
    folder = root / repo_id.replace("/", "--")
    shutil.copytree(tiny, folder)
    (folder / "lorastudio_fetch.json").write_text(json.dumps({"repo_id": repo_id}), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def bases(tiny_model, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bases")
    tiny = tiny_model(FAMILY)
    return {
        "turbo": _marked_copy(tiny, root, "Tongyi-MAI/Z-Image-Turbo"),
        "base": _marked_copy(tiny, root, "Tongyi-MAI/Z-Image"),
        "unknown": tiny,
    }


@pytest.fixture(scope="module")
def assistant(bases, tmp_path_factory) -> Path:
    """A rank-2 assistant LoRA over some attention layers, in ai-toolkit's Z-Image adapter
    layout (diffusion_model.<module>.lora_A / lora_B + alpha)."""
    den = families.get(FAMILY).load_denoiser(str(bases["turbo"]), None, torch.float32, torch.device("cpu"))
    layers = dict(den.named_modules())
    g = torch.Generator().manual_seed(7)
    peft = {}
    for name in ASSISTANT_LAYERS:
        out_f, in_f = layers[name].weight.shape
        peft[f"{name}.lora_A.weight"] = torch.randn(ASSISTANT_RANK, in_f, generator=g) * 0.3
        peft[f"{name}.lora_B.weight"] = torch.randn(out_f, ASSISTANT_RANK, generator=g) * 0.3
    path = tmp_path_factory.mktemp("assistant") / "turbo_adapter.safetensors"
    write_lora_file(path, to_kohya(peft, FAMILY, ASSISTANT_ALPHA), {"format": "pt"})
    return path


def _raw(base: Path, data: Path, **extra) -> dict:
    return {
        "family": FAMILY,
        "base_model": str(base),
        "data_dir": str(data),
        "resolution": 32,
        "steps": 3,
        "learning_rate": 5e-3,
        "lora_rank": 4,
        "batch_size": 2,
        "max_sequence_length": 16,
        "seed": 0,
        **extra,
    }


def test_the_merge_adds_alpha_over_rank_times_b_a_to_exactly_its_layers(bases, assistant):
    fam = families.get(FAMILY)
    den = fam.load_denoiser(str(bases["turbo"]), None, torch.float32, torch.device("cpu"))
    before = {k: v.clone() for k, v in den.state_dict().items()}
    cfg = TrainConfig(
        family=FAMILY, base_model=str(bases["turbo"]), data_dir="x", assistant_lora=str(assistant)
    )
    assert merge_assistant(den, cfg, fam) == {"layers": 4, "rank": ASSISTANT_RANK, "alpha": ASSISTANT_ALPHA}
    file = load_file(str(assistant))
    after = den.state_dict()
    for key, value in before.items():
        name = key.removesuffix(".weight")
        if name in ASSISTANT_LAYERS:
            a, b = (
                file[f"diffusion_model.{name}.lora_A.weight"],
                file[f"diffusion_model.{name}.lora_B.weight"],
            )
            torch.testing.assert_close(after[key], value + (ASSISTANT_ALPHA / ASSISTANT_RANK) * b @ a)
            assert not torch.equal(after[key], value)
        else:
            assert torch.equal(after[key], value), key


def test_a_run_trains_on_the_merged_base_and_its_lora_holds_only_its_own_layers(
    bases, assistant, small_dataset, tmp_path, monkeypatch
):
    monkeypatch.setenv("LORASTUDIO_HOME", str(tmp_path / "home"))
    plain = train(
        parse_train_config(_raw(bases["turbo"], small_dataset, output_name="plain")), [].append, device="cpu"
    )
    helped = train(
        parse_train_config(
            _raw(bases["turbo"], small_dataset, output_name="helped", assistant_lora=str(assistant))
        ),
        [].append,
        device="cpu",
        return_denoiser=True,
    )
    assert helped.losses != plain.losses  # the steps saw the merged base
    saved, without = load_file(str(helped.lora_path)), load_file(str(plain.lora_path))
    assert saved.keys() == without.keys()  # the trained adapter's layers, no assistant layer added
    assert {min(t.shape) for t in saved.values()} == {4}  # the run's rank, not the assistant's 2
    layers = dict(helped.denoiser.named_modules())
    for name in ASSISTANT_LAYERS:  # the file's values are the trained adapter's, not base + assistant
        trained_b = layers[name].lora_B["default"].weight
        torch.testing.assert_close(saved[f"transformer.{name}.lora_B.weight"], trained_b)
    sidecar = json.loads(helped.lora_path.with_suffix(".json").read_text())
    record = sidecar["assistant_lora"]
    assert record["source"] == str(assistant) == sidecar["config"]["assistant_lora"]
    assert record["sha256"] == hashlib.sha256(assistant.read_bytes()).hexdigest()
    assert record["merged_for_training"] and not record["in_this_lora"] and not record["use_at_inference"]
    assert "assistant_lora" not in json.loads(plain.lora_path.with_suffix(".json").read_text())


@pytest.mark.parametrize(
    ("base", "says"),
    [("base", "is not step-distilled (known checkpoint Tongyi-MAI/Z-Image)"), ("unknown", "cannot tell")],
)
def test_refused_for_a_base_that_is_not_known_to_be_distilled(
    base, says, bases, assistant, small_dataset, tmp_path, monkeypatch
):
    monkeypatch.setenv("LORASTUDIO_HOME", str(tmp_path / "home"))
    cfg = parse_train_config(_raw(bases[base], small_dataset, assistant_lora=str(assistant)))
    events: list = []
    with pytest.raises(ConfigError) as err:
        train(cfg, events.append, device="cpu")
    assert [p.field for p in err.value.problems] == ["assistant_lora"] and says in str(err.value)
    assert not any(getattr(e, "type", "") == "model_load_started" for e in events)  # refused before loading


def test_a_missing_file_or_a_malformed_value_is_refused(bases, small_dataset, tmp_path, monkeypatch):
    monkeypatch.setenv("LORASTUDIO_HOME", str(tmp_path / "home"))
    for value, says in (("adapter.bin", ".safetensors"), ("repo/file.safetensors", "owner/repo/path")):
        with pytest.raises(ConfigError, match=says):
            parse_train_config(_raw(bases["turbo"], small_dataset, assistant_lora=value))
    cfg = parse_train_config(
        _raw(bases["turbo"], small_dataset, assistant_lora=str(tmp_path / "gone.safetensors"))
    )
    with pytest.raises(ConfigError, match="file not found"):
        train(cfg, [].append, device="cpu")
    offline = parse_train_config(
        _raw(bases["turbo"], small_dataset, assistant_lora="acme/adapter/a.safetensors")
    )
    with pytest.raises(ConfigError, match="not in the hub cache"):
        train(offline, [].append, device="cpu")


def test_a_hub_assistant_is_found_in_the_hub_cache_the_environment_names_now(
    bases, assistant, small_dataset, tmp_path, monkeypatch
):
    """Offline, a hub assistant_lora in the hub cache of $HF_HUB_CACHE as set now (not as it was
    when huggingface_hub was imported: its constants keep that) passes the checks and is used."""
    from lorastudio.training.adapters.assistant import assistant_file
    from lorastudio.training.adapters.assistant_rules import assistant_problems

    storage = tmp_path / "hub" / "models--acme--adapter"
    snapshot = storage / "snapshots" / ("c" * 40)
    snapshot.mkdir(parents=True)
    shutil.copy(assistant, snapshot / "a.safetensors")
    (storage / "refs").mkdir()
    (storage / "refs" / "main").write_text("c" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    cfg = parse_train_config(_raw(bases["turbo"], small_dataset, assistant_lora="acme/adapter/a.safetensors"))
    assert assistant_problems(cfg, families.get(FAMILY)) == []
    assert assistant_file("acme/adapter/a.safetensors") == snapshot / "a.safetensors"


def test_a_hostile_hub_ref_is_not_read_for_the_assistant(bases, assistant, tmp_path):
    """RELIABILITY 590: the assistant's hub-cache lookup (assistant_problems: the preflight's and
    the job service's) used huggingface_hub's try_to_load_from_cache, which reads refs/main whole:
    a sparse terabyte there read until the out-of-memory kill, a /dev/zero link for ever, a FIFO
    blocked. Run in a child capped by RLIMIT_AS (and a timeout): each is refused naming the damaged
    ref, read bounded; the run's download (assistant_file) refuses it too, before huggingface_hub."""
    cache = tmp_path / "hub"
    for repo in ("ok/good", "bad/huge", "bad/zero", "bad/fifo"):
        storage = cache / ("models--" + repo.replace("/", "--"))
        (storage / "snapshots" / ("c" * 40)).mkdir(parents=True)
        shutil.copy(assistant, storage / "snapshots" / ("c" * 40) / "a.safetensors")
        (storage / "refs").mkdir()
    (cache / "models--ok--good" / "refs" / "main").write_text("c" * 40)
    with open(cache / "models--bad--huge" / "refs" / "main", "wb") as fh:
        fh.truncate(1 << 40)  # sparse: no disk
    (cache / "models--bad--zero" / "refs" / "main").symlink_to("/dev/zero")
    os.mkfifo(cache / "models--bad--fifo" / "refs" / "main")
    code = (
        "import resource, json, sys; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30));"
        "from lorastudio import families; from lorastudio.config import TrainConfig;"
        "from lorastudio.errors import ModelSourceError;"
        "from lorastudio.training.adapters.assistant import assistant_file;"
        "from lorastudio.training.adapters.assistant_rules import assistant_problems;"
        "out = {};\n"
        "for r in ['ok/good', 'bad/huge', 'bad/zero', 'bad/fifo']:\n"
        f"  cfg = TrainConfig(family='{FAMILY}', base_model=sys.argv[1], data_dir='x', assistant_lora=r + '/a.safetensors')\n"
        f"  out[r] = [p.message for p in assistant_problems(cfg, families.get('{FAMILY}'))]\n"
        "  try: out[r].append(str(assistant_file(r + '/a.safetensors')))\n"
        "  except ModelSourceError as err: out[r].append('refused: ' + str(err))\n"
        "print(json.dumps(out))"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "HF_HUB_CACHE": str(cache),
        "HF_HUB_OFFLINE": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", code, str(bases["turbo"])],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout)
    assert found["ok/good"] == [str(cache / "models--ok--good" / "snapshots" / ("c" * 40) / "a.safetensors")]
    for repo in ("bad/huge", "bad/zero", "bad/fifo"):
        problem, download = found[repo]
        assert f"the hub cache of {repo} is damaged" in problem and "refs/main" in problem, problem
        assert download.startswith("refused: ") and problem in download


def test_distilled_is_read_from_the_checkpoint_for_any_family(tiny_model, tmp_path):
    """Family.distilled is family-agnostic: Krea 2's model_index.json says is_distilled."""
    fam = families.get("krea2")
    assert fam.distilled(str(tiny_model("krea2")), None) == (False, "model_index.json is_distilled=false")
    turbo = tmp_path / "krea2-turbo"
    shutil.copytree(tiny_model("krea2"), turbo)
    index = json.loads((turbo / "model_index.json").read_text())
    (turbo / "model_index.json").write_text(json.dumps({**index, "is_distilled": True}))
    assert fam.distilled(str(turbo), None) == (True, "model_index.json is_distilled=true")
    assert fam.distilled("Tongyi-MAI/Z-Image-Turbo", None) == (
        True,
        "known checkpoint Tongyi-MAI/Z-Image-Turbo",
    )
