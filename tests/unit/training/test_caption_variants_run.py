"""Tag shuffle and tag dropout in a run on a tiny model (CPU): they change what the model sees
(and so the run), each variant is encoded once in phase 1 (the conditioning phase counts them),
an entry's own setting applies to its images only, and a stopped run resumes bitwise."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from lorastudio.data.caption_variants import scan_variants
from lorastudio.errors import ConfigError
from lorastudio.settings import get_settings
from lorastudio.training.events import StopRequest
from lorastudio.training.loop import train
from lorastudio.training.preflight import preflight

AUGMENT = {"shuffle_tags": True, "keep_tokens": 1, "tag_dropout": 0.2, "caption_variants": 3, "steps": 4}


@pytest.fixture(scope="module")
def tagged(small_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """small_dataset with tag captions ("sks, <words of its caption>")."""
    out = tmp_path_factory.mktemp("tagged") / "tagged"
    out.mkdir()
    for img in sorted(small_dataset.glob("*.png")):
        shutil.copy(img, out / img.name)
        words = img.with_suffix(".txt").read_text().split()
        (out / f"{img.stem}.txt").write_text(", ".join(["sks", *words]))
    return out


def _conditioning_total(events: list) -> int:
    return max(e.total for e in events if e.type == "preparing" and e.phase == "conditioning")


def test_shuffle_and_dropout_change_the_run_and_encode_each_variant(make_config, tagged, tmp_path) -> None:
    plain_events: list = []
    plain = train(
        make_config("flux", data_dir=str(tagged), output_name="plain", steps=4),
        plain_events.append,
        device="cpu",
    )
    events: list = []
    varied = train(
        make_config("flux", data_dir=str(tagged), output_name="varied", **AUGMENT),
        events.append,
        device="cpu",
    )
    assert varied.losses != plain.losses
    assert _conditioning_total(plain_events) == 4  # 4 captions
    assert 4 < _conditioning_total(events) <= 4 + 4 * 3  # + up to 3 distinct variants each
    off = {"path": str(tagged), "shuffle_tags": False, "keep_tokens": 0, "tag_dropout": 0.0}
    with pytest.raises(ConfigError, match="keep_tokens: needs shuffle_tags or tag_dropout"):
        train(
            make_config("flux", data_dir=None, datasets=[off], output_name="off", **AUGMENT),
            [].append,
            device="cpu",
        )
    again = shutil.copytree(tagged, tmp_path / "tagged")  # two entries are two folders
    both = make_config("flux", data_dir=None, datasets=[off, {"path": str(again)}], **AUGMENT)
    run = preflight(both, get_settings(), "cpu")
    variants = scan_variants(run.scan, 3, 0)
    assert [len(v) for v in variants] == [1] * 4 + [3] * 4  # the first entry's captions as they are
    assert [v[0] for v in variants[:4]] == [it.caption for it in run.scan.items[:4]]


def test_a_run_with_caption_variants_resumes_bitwise(make_config, tagged) -> None:
    full = train(
        make_config("flux", data_dir=str(tagged), output_name="full", **AUGMENT), [].append, device="cpu"
    )
    events: list = []

    def stop() -> StopRequest | None:
        done = [e for e in events if e.type == "progress"]
        return StopRequest(save=True) if done and done[-1].step >= 2 else None

    cfg = make_config("flux", data_dir=str(tagged), output_name="part", **AUGMENT)
    assert train(cfg, events.append, stop, device="cpu").stopped
    resumed = train(cfg, [].append, device="cpu", resume=get_settings().outputs_dir / "part")
    assert resumed.losses == full.losses
    a, b = load_file(str(full.lora_path)), load_file(str(resumed.lora_path))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def tagged_pairs(small_pairs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """small_pairs with tag captions ("sks, <words of its caption>")."""
    out = tmp_path_factory.mktemp("tagged-pairs") / "pairs"
    shutil.copytree(small_pairs, out)
    for txt in sorted(out.glob("*.txt")):
        txt.write_text(", ".join(["sks", *txt.read_text().split()]))
    return out


def test_caption_variants_train_an_edit_family_keyed_with_the_controls(make_config, tagged_pairs) -> None:
    """Qwen-Image-Edit's prompt sees the controls: each caption variant is encoded with its item's
    controls (more conditionings than captions), the run trains, and the variants change it."""
    common = {"data_dir": str(tagged_pairs), "steps": 4, "batch_size": 1}
    plain_events: list = []
    plain = train(
        make_config("qwen-image-edit", output_name="e-plain", **common), plain_events.append, device="cpu"
    )
    events: list = []
    varied = train(
        make_config("qwen-image-edit", output_name="e-varied", **{**common, **AUGMENT}),
        events.append,
        device="cpu",
    )
    assert varied.steps_run == 4 and all(torch.isfinite(torch.tensor(varied.losses)))
    assert _conditioning_total(events) > _conditioning_total(plain_events)
    assert plain.losses != varied.losses


def test_caption_variants_with_sdxl_text_encoder_training_encode_the_pick_in_the_step(
    make_config, tagged
) -> None:
    """train_text_encoder encodes each step's captions through the text encoders' LoRA: the
    picked variant is what it encodes, so shuffle / dropout change the run there too."""
    common = {"data_dir": str(tagged), "train_text_encoder": True, "steps": 3, "batch_size": 1}
    plain = train(make_config("sdxl", output_name="te-plain", **common), [].append, device="cpu")
    varied = train(
        make_config("sdxl", output_name="te-varied", **{**common, **AUGMENT, "steps": 3}),
        [].append,
        device="cpu",
    )
    assert varied.steps_run == 3 and plain.losses != varied.losses
