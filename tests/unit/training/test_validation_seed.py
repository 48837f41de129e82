"""RELIABILITY 1681: the validation loss's fixed noise is drawn from `validation_seed` (default 0),
not from the run's `seed`, so two runs of other seeds measure the same held-out images at the same
noise; a run resumed from a checkpoint written before the setting (its identity without it) keeps
the noise of its `seed`, exactly, in its later checkpoints too."""

from __future__ import annotations

import json

import pytest
import torch
from PIL import Image, ImageOps

import lorastudio.training.loop_inputs as loop_inputs
from lorastudio.config import parse_train_config
from lorastudio.errors import ConfigError
from lorastudio.settings import get_settings
from lorastudio.training.loop import train
from lorastudio.training.resume.checkpoint import find_checkpoint, read_checkpoint_info, resume_settings
from stop_at import stop_at


def _noise(monkeypatch) -> list[torch.Tensor]:
    """The held-out images' fixed noise of each run that follows, as encode_held_out made it."""
    made: list[torch.Tensor] = []
    real = loop_inputs.encode_held_out

    def recording(*args, **kwargs):
        held = real(*args, **kwargs)
        made.append(torch.stack([h.noise for h in held]))  # [images, L, C, h, w]
        return held

    monkeypatch.setattr(loop_inputs, "encode_held_out", recording)
    return made


def test_runs_of_other_seeds_validate_at_the_same_noise(make_config, small_dataset, tmp_path, monkeypatch):
    held = tmp_path / "held"
    held.mkdir()
    with Image.open(sorted(small_dataset.glob("*.png"))[0]) as img:
        ImageOps.mirror(img.convert("RGB")).save(held / "other.png")  # the same image for both runs
    (held / "other.txt").write_text("another image")
    made = _noise(monkeypatch)
    common = {"steps": 1, "validation_split": str(held)}
    for seed in (1, 2):
        train(make_config(output_name=f"seed-{seed}", seed=seed, **common), [].append, device="cpu")
    train(make_config(output_name="other", seed=1, validation_seed=5, **common), [].append, device="cpu")
    assert torch.equal(made[0], made[1])  # seed 1 and seed 2: the same draws (before: each its seed's)
    assert not torch.equal(made[0], made[2])  # validation_seed draws them


def _as_before_the_setting(checkpoint) -> None:
    """Make `checkpoint` one of a version before validation_seed: neither its identity nor its
    config records it, nor its identity the validation noise's rule."""
    path = checkpoint / "identity.json"
    info = json.loads(path.read_text())
    assert info["identity"].pop("validation_noise_rule") == 2
    for part in ("identity", "config"):
        info[part].pop("validation_seed")
    path.write_text(json.dumps(info))


def test_an_older_checkpoint_resumes_with_the_noise_of_its_seed_exactly(make_config, monkeypatch):
    # the run of the older version, uninterrupted: its noise was the seed's (7), as validation_seed 7 gives
    common = {"steps": 4, "seed": 7, "validation_seed": 7, "validation_split": 0.25, "validate_every": 1}
    whole, _ = stop_at(99)
    done = train(make_config(output_name="whole", **common), whole.append, device="cpu")
    events, stop = stop_at(2)
    parted = train(
        make_config(output_name="parted", save_every=1, **common), events.append, stop, device="cpu"
    )
    assert parted.stopped and parted.steps_run == 2
    checkpoint = find_checkpoint(get_settings().outputs_dir / "parted")
    _as_before_the_setting(checkpoint)
    again = parse_train_config(resume_settings(read_checkpoint_info(checkpoint), {}))
    assert (again.seed, again.validation_seed) == (7, 0)  # the default: the identity check lets it pass
    with pytest.raises(
        ConfigError, match="validation_seed"
    ):  # another value: the checkpoint's noise is fixed
        train(again.model_copy(update={"validation_seed": 5}), [].append, device="cpu", resume=checkpoint)
    rest: list = []
    resumed = train(again, rest.append, device="cpu", resume=checkpoint)
    rounds = [(e.step, e.loss) for e in events + rest if e.type == "validation"]
    assert rounds == [(e.step, e.loss) for e in whole if e.type == "validation"]  # bitwise
    assert parted.losses[:2] + resumed.losses[2:] == done.losses
    last = read_checkpoint_info(find_checkpoint(get_settings().outputs_dir / "parted"))
    assert (
        last["step"] == 3 and "validation_noise_rule" not in last["identity"]
    )  # kept by its later checkpoints


def test_the_default_is_left_out_of_what_a_config_writes_and_the_api_keeps_it():
    """The version before forbids keys it does not know (RELIABILITY 1330): a run at the default
    writes no validation_seed (records, checkpoints, sidecars), one that sets it does; the API's
    answers always carry it."""
    from lorastudio.api.schemas_runs import TrainConfigOut
    from lorastudio.config import TrainConfig

    cfg = TrainConfig(family="flux", base_model="/m", data_dir="/d", output_name="a")
    assert "validation_seed" not in cfg.model_dump(mode="json") and cfg.validation_seed == 0
    assert TrainConfig.model_validate(cfg.model_dump(mode="json")) == cfg
    assert cfg.model_copy(update={"validation_seed": 5}).model_dump(mode="json")["validation_seed"] == 5
    assert (
        TrainConfigOut.model_validate(cfg.model_dump(mode="json")).model_dump(mode="json")["validation_seed"]
        == 0
    )
