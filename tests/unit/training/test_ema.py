"""The EMA of the adapter weights (training/ema.py) on the tiny models: the saved LoRA is the EMA
of the raw weights over the steps (computed here by hand from the per-step checkpoints), the raw
LoRA is saved beside it and equals the run without EMA, the sidecars say which is which; a
stopped run resumes bitwise (EMA state in the checkpoint), the pipelined loop keeps the same EMA,
and sample previews render the EMA or the raw weights as asked."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from lorastudio.config import parse_train_config
from lorastudio.errors import ConfigError
from lorastudio.settings import get_settings
from lorastudio.training import optimize
from lorastudio.training.ema import AdapterEma
from lorastudio.training.events import StopRequest
from lorastudio.training.loop import train
from lorastudio.training.resume.checkpoint import list_checkpoints

DECAY = 0.5  # large steps of the EMA, so that each one shows


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and bool(a) and all(torch.equal(a[k], b[k]) for k in a)


def _peft_name(file_key: str, names: set[str]) -> str:
    """The EMA's parameter name of a LoRA-file key (diffusers layout: "<denoiser>.<module>.lora_A.weight")."""
    bare = file_key.split(".", 1)[1]
    name = bare.replace(".lora_A.", ".lora_A.default.").replace(".lora_B.", ".lora_B.default.")
    assert name in names, (file_key, sorted(names)[:3])
    return name


def test_the_saved_lora_is_the_ema_of_the_raw_weights_over_the_steps(make_config):
    cfg = make_config(steps=4, ema_decay=DECAY, save_every=1, keep_last=10, output_name="ema")
    result = train(cfg, [].append, device="cpu")
    run_dir = result.lora_path.parent
    ema_file, raw_file = load_file(str(result.lora_path)), load_file(str(run_dir / "ema.raw.safetensors"))
    assert ema_file.keys() == raw_file.keys() and not _same(ema_file, raw_file)
    plain = train(make_config(steps=4, output_name="plain"), [].append, device="cpu")
    assert _same(raw_file, load_file(str(plain.lora_path))) and result.losses == plain.losses  # no effect

    checkpoints = list_checkpoints(run_dir)
    assert [p.name for p in checkpoints] == ["step-000001", "step-000002", "step-000003"]
    first = torch.load(checkpoints[0] / "state.pt", weights_only=True)["ema"]
    assert first["updates"] == 1
    names = set(first["shadow"])
    by_name = {_peft_name(k, names): k for k in raw_file}
    raw_at = [load_file(str(p / "lora.safetensors")) for p in checkpoints]  # peft keys, no prefix
    step1 = {_peft_name("x." + k, names): v for k, v in raw_at[0].items()}
    for name in names:
        if ".lora_B." in name:  # initialised to zero: after one step the shadow is (1 - d) x w1
            torch.testing.assert_close(first["shadow"][name], (1 - DECAY) * step1[name], rtol=0, atol=1e-12)
    shadow = {n: t.clone() for n, t in first["shadow"].items()}
    later = [{_peft_name("x." + k, names): v for k, v in w.items()} for w in raw_at[1:]]
    later.append({n: raw_file[k] for n, k in by_name.items()})  # step 4: the raw LoRA
    for weights in later:  # steps 2, 3, 4 by hand
        for name in names:
            shadow[name] = DECAY * shadow[name] + (1 - DECAY) * weights[name]
    for name, key in by_name.items():
        torch.testing.assert_close(ema_file[key], shadow[name], rtol=1e-6, atol=1e-9)

    sidecar = json.loads(result.lora_path.with_suffix(".json").read_text())
    assert sidecar["ema"] == {
        "decay": DECAY, "update_every": 1, "weights": "ema", "updates": 4, "raw_file": "ema.raw.safetensors"
    }  # fmt: skip
    raw_sidecar = json.loads((run_dir / "ema.raw.json").read_text())
    assert raw_sidecar["ema"]["weights"] == "raw" and raw_sidecar["lora_file"] == "ema.raw.safetensors"


def test_validation_names_the_file_of_the_weights_it_measured(make_config):
    """The validation loss is measured on the raw weights (those the snapshots hold): with EMA the
    sidecar's best / last round of the final step names the raw file, not the run's LoRA, which
    holds the EMA weights (it named that one, giving it a loss its weights never had)."""
    common = {"steps": 2, "validation_split": 0.25, "batch_size": 1}
    ema = train(make_config(ema_decay=DECAY, output_name="vema", **common), [].append, device="cpu")
    plain = train(make_config(output_name="vplain", **common), [].append, device="cpu")
    got = json.loads(ema.lora_path.with_suffix(".json").read_text())["validation"]
    want = json.loads(plain.lora_path.with_suffix(".json").read_text())["validation"]
    losses = [(p["step"], p["loss"]) for p in got["series"]]
    assert (
        losses == [(p["step"], p["loss"]) for p in want["series"]] and got["weights"] == "raw"
    )  # raw weights
    assert (want["last"]["lora"], got["last"]["lora"], got["best"]["lora"]) == (
        "vplain.safetensors",
        "vema.raw.safetensors",
        "vema.raw.safetensors",
    )
    raw = json.loads((ema.lora_path.parent / "vema.raw.json").read_text())["validation"]
    assert raw["last"]["lora"] == "vema.raw.safetensors"


@pytest.mark.parametrize(
    ("settings", "adapter"),
    [({"lora_format": "kohya", "adapter": "lokr", "optimizer": "prodigy", "learning_rate": 1.0}, "lokr"),
     ({"lora_rank": 2, "lora_alpha": 1.0}, "lora")],
)  # fmt: skip
def test_each_files_header_says_which_weights_it_holds_and_how_they_were_trained(
    make_config, settings, adapter
):
    """The EMA LoRA and its raw twin had the same header, word for word: a file passed on without
    its sidecar could not say which weights it held, nor the adapter / optimizer of its run. The
    header now says it (lorastudio.ema, .ema_decay, .adapter, .optimizer), matching the sidecars."""
    from safetensors import safe_open

    cfg = make_config(ema_decay=DECAY, steps=2, save_lora_every=1, output_name="head", **settings)
    result = train(cfg, [].append, device="cpu")
    run_dir = result.lora_path.parent

    def header(path):
        with safe_open(str(path), "pt") as f:
            return f.metadata()

    files = {
        "ema": result.lora_path,
        "raw": run_dir / "head.raw.safetensors",
        "snapshot": run_dir / "loras" / "head-step-000001.safetensors",
    }
    for kind, path in files.items():
        meta, sidecar = header(path), json.loads(path.with_suffix(".json").read_text())
        assert meta["lorastudio.ema"] == sidecar["ema"]["weights"] == ("ema" if kind == "ema" else "raw"), (
            kind
        )
        assert float(meta["lorastudio.ema_decay"]) == sidecar["ema"]["decay"] == DECAY
        assert meta["lorastudio.adapter"] == sidecar["adapter"] == adapter
        assert meta["lorastudio.optimizer"] == sidecar["config"]["optimizer"] == cfg.optimizer
        assert (meta["lorastudio.rank"], meta["lorastudio.steps"]) == (
            str(sidecar["rank"]),
            str(sidecar["steps"]),
        )
    plain = train(make_config(steps=1, output_name="plain", **settings), [].append, device="cpu")
    assert header(plain.lora_path)["lorastudio.ema"] == ""  # no EMA in the run


def test_an_extended_ema_run_keeps_its_raw_final_as_the_step_snapshot(make_config, tmp_path, monkeypatch):
    """Every snapshot holds the raw weights (the ones validation measures): extending an EMA run
    keeps its final step's raw file as that step's snapshot (it kept the EMA one, beside raw
    snapshots), and `lorastudio lora list` says which weights each file holds and marks the
    measured ones."""
    from typer.testing import CliRunner

    from lorastudio.cli.app import _register, app
    from lorastudio.lora.snapshots import run_loras
    from lorastudio.training.resume.checkpoint import find_checkpoint, read_checkpoint_info, resume_settings

    cfg = make_config(
        steps=2, ema_decay=DECAY, save_every=1, validation_split=0.25, validate_every=1, batch_size=1,
        output_name="vx",
    )  # fmt: skip
    first = train(cfg, [].append, device="cpu")
    run_dir = first.lora_path.parent
    raw_at_2 = (run_dir / "vx.raw.safetensors").read_bytes()
    settings = resume_settings(read_checkpoint_info(find_checkpoint(run_dir)), {"steps": 3})
    train(parse_train_config(settings), [].append, device="cpu", resume=run_dir)
    kept = run_dir / "loras" / "vx-step-000002.safetensors"
    assert kept.read_bytes() == raw_at_2  # the raw weights of step 2, not the EMA ones
    assert json.loads(kept.with_suffix(".json").read_text())["ema"]["weights"] == "raw"
    rows = [(r["step"], r["final"], r["weights"]) for r in run_loras(run_dir)]
    # each checkpoint keeps its step's EMA weights too (RELIABILITY 812)
    assert rows == [
        (1, False, "raw"), (1, False, "ema"), (2, False, "raw"), (2, False, "ema"), (3, True, "raw"), (3, True, "ema")
    ]  # fmt: skip

    monkeypatch.setenv("LORASTUDIO_HOME", str(tmp_path / "home"))
    if not app.registered_commands:
        _register()
    listed = CliRunner().invoke(app, ["lora", "list", str(run_dir)])
    assert listed.exit_code == 0, listed.output
    lines = {line.split()[1].rsplit("/", 1)[-1]: line for line in listed.output.splitlines()[1:]}
    assert "ema weights" in lines["vx.safetensors"] and "val" not in lines["vx.safetensors"]
    assert "raw weights" in lines["vx.raw.safetensors"] and "last" in lines["vx.raw.safetensors"]
    assert all("raw weights, val " in lines[f"vx-step-00000{n}.safetensors"] for n in (1, 2))
    assert (
        "ema weights" in lines["vx-step-000001.ema.safetensors"]
        and "val" not in lines["vx-step-000001.ema.safetensors"]
    )
    assert sum("best" in line for line in lines.values()) == 1


def test_update_every_skips_steps(make_config):
    every = train(
        make_config(steps=4, ema_decay=DECAY, ema_update_every=2, output_name="e2"), [].append, device="cpu"
    )
    each = train(make_config(steps=4, ema_decay=DECAY, output_name="e1"), [].append, device="cpu")
    assert not _same(load_file(str(every.lora_path)), load_file(str(each.lora_path)))
    assert json.loads(every.lora_path.with_suffix(".json").read_text())["ema"]["updates"] == 2


def _stop_at(step: int):
    events: list = []

    def check() -> StopRequest | None:
        done = [e for e in events if e.type == "progress"]
        return StopRequest(save=True) if done and done[-1].step >= step else None

    return events, check


def test_stop_and_resume_keeps_the_ema_bitwise(make_config):
    settings = {
        "steps": 5,
        "ema_decay": 0.7,
        "ema_update_every": 2,
        "ema_on_cpu": True,
        "caption_dropout": 0.3,
    }
    full = train(make_config(output_name="full", **settings), [].append, device="cpu")
    events, stop = _stop_at(3)
    first = train(make_config(output_name="part", **settings), events.append, stop, device="cpu")
    assert first.stopped and first.steps_run == 3
    run_dir = get_settings().outputs_dir / "part"
    resumed = train(make_config(output_name="part", **settings), [].append, device="cpu", resume=run_dir)
    assert resumed.losses == full.losses
    assert _same(load_file(str(full.lora_path)), load_file(str(resumed.lora_path)))
    full_raw = full.lora_path.with_name("full.raw.safetensors")
    assert _same(load_file(str(full_raw)), load_file(str(run_dir / "part.raw.safetensors")))


def test_the_pipelined_loop_keeps_the_same_ema(make_config, monkeypatch):
    settings = {"steps": 3, "ema_decay": DECAY}
    plain = train(make_config(output_name="plain", **settings), [].append, device="cpu")
    monkeypatch.setattr(optimize, "PIPELINED_DEVICES", ("cuda", "cpu"))
    piped = train(make_config(output_name="piped", **settings), [].append, device="cpu")
    assert piped.losses == plain.losses
    assert _same(load_file(str(plain.lora_path)), load_file(str(piped.lora_path)))


def _sample_bytes(result, events) -> bytes:
    (ready,) = [e for e in events if e.type == "sample_ready"]
    return (result.lora_path.parent / ready.images[0]).read_bytes()


def test_samples_render_the_ema_or_the_raw_weights(make_config):
    samples = {"steps": 2, "learning_rate": 5e-2, "sample_prompts": ["a red circle"], "sample_steps": 2}
    runs = {}
    for name, extra in {
        "ema": {"ema_decay": DECAY},
        "raw": {"ema_decay": DECAY, "sample_with_ema": False},
        "none": {},
    }.items():
        events: list = []
        result = train(make_config(output_name=name, **samples, **extra), events.append, device="cpu")
        runs[name] = (result, _sample_bytes(result, events))
    assert runs["raw"][1] == runs["none"][1]  # the raw weights are those of the run without EMA
    assert runs["ema"][1] != runs["raw"][1]
    assert runs["ema"][0].losses == runs["raw"][0].losses  # samples never change the training


def test_ema_settings_without_an_ema_are_refused():
    base = {"family": "flux", "base_model": "a/b", "data_dir": "d"}
    with pytest.raises(ConfigError) as err:
        parse_train_config({**base, "ema_update_every": 2, "ema_on_cpu": True, "sample_with_ema": False})
    assert {p.field for p in err.value.problems} == {"ema_update_every", "ema_on_cpu", "sample_with_ema"}
    assert "needs ema_decay" in str(err.value)
    with pytest.raises(ConfigError, match="sample_with_ema: needs sample_prompts"):
        parse_train_config({**base, "ema_decay": 0.9, "sample_with_ema": False})
    with pytest.raises(ConfigError, match="ema_decay"):
        parse_train_config({**base, "ema_decay": 1.0})


def test_the_ema_swaps_back_the_raw_weights_and_refuses_a_foreign_state():
    param = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    ema = AdapterEma({"w": param}, 0.5, on_cpu=True)
    with torch.no_grad():
        param.add_(2.0)
    ema.update(1)
    assert torch.equal(ema.shadow["w"], torch.tensor([2.0, 3.0]))
    with pytest.raises(RuntimeError), ema.swapped_in():
        assert torch.equal(param.detach(), torch.tensor([2.0, 3.0]))
        raise RuntimeError("the block fails")
    assert torch.equal(param.detach(), torch.tensor([3.0, 4.0]))  # raw weights back
    with pytest.raises(ValueError, match="does not fit"):
        ema.load_state_dict({"shadow": {"v": torch.zeros(2)}, "updates": 1})


@pytest.mark.slow  # three short runs (~10-20 s); the default suite: test_ema_preview_files.py
def test_a_discarded_resume_keeps_the_preview_pair_it_found_and_a_finished_one_keeps_the_newest(make_config):
    """RELIABILITY 1743: a resumed session's preview round removed the EMA preview pair an earlier
    session kept (samples/<name>-step-N.ema.*), and a stop without save then removed its own: the
    folder lost the weights of the earlier session's preview. It now removes an earlier session's
    pair only when it ends well (beside keep_loras), keeping the newest step's."""
    settings = {
        "steps": 3, "sample_every": 1, "ema_decay": DECAY, "batch_size": 1,
        "sample_prompts": ["a red circle"], "sample_steps": 1,
    }  # fmt: skip
    events, stop = _stop_at(1)
    assert train(make_config(output_name="pair", **settings), events.append, stop, device="cpu").stopped
    run_dir = get_settings().outputs_dir / "pair"

    def pairs() -> list[str]:
        return sorted(p.name for p in (run_dir / "samples").glob("*.ema.*"))

    first = ["pair-step-000001.ema.json", "pair-step-000001.ema.safetensors"]
    assert pairs() == first
    seen: list = []

    def discard() -> StopRequest | None:
        done = [e for e in seen if e.type == "progress"]
        return StopRequest(save=False) if done and done[-1].step >= 2 else None

    resumed = train(
        make_config(output_name="pair", **settings), seen.append, discard, device="cpu", resume=run_dir
    )
    assert resumed.stopped and pairs() == first  # was: [] (the step-2 pair gone with the session)
    train(make_config(output_name="pair", **settings), [].append, device="cpu", resume=run_dir)
    assert pairs() == ["pair-step-000002.ema.json", "pair-step-000002.ema.safetensors"]  # one pair
