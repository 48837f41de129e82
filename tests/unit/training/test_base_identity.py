"""The base model's identity (training/resume/identity_base.py, data/disk_cache.component_fingerprint) on
a hand-made hub cache holding the tiny FLUX.1 as "acme/flux": a tokenizer is fingerprinted by its
files (a changed tokenizer gets new caption shards and refuses a resume, naming it); a checkpoint
written under the old rule still resumes on an unchanged base; a hub id fetched after the
preflight is recorded, and compared, by its content."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from lorastudio.data.disk_cache import cache_root, cache_stats, component_fingerprint
from lorastudio.errors import ConfigError
from lorastudio.settings import get_settings
from lorastudio.training.loop import train
from lorastudio.training.resume.checkpoint import find_checkpoint, read_checkpoint_info
from stop_at import stop_at

COMMIT = "0123456789abcdef0123456789abcdef01234567"
REPO = "acme/flux"


def _hub_cache(tiny_model: Callable[[str], Path], cache: Path) -> Path:
    """The tiny FLUX.1 as the hub cache keeps `REPO` (snapshot COMMIT, refs/main); its snapshot."""
    storage = cache / "models--acme--flux"
    snapshot = storage / "snapshots" / COMMIT
    shutil.copytree(tiny_model("flux"), snapshot)
    (storage / "refs").mkdir()
    (storage / "refs" / "main").write_text(COMMIT)
    return snapshot


def _use_hub_cache(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point the hub cache at `cache` for lorastudio (the environment, read at call time) and for
    the loaders: huggingface_hub, diffusers and transformers copy HF_HUB_CACHE into module
    constants when imported (earlier in a pytest session than this test)."""
    import sys

    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] not in ("huggingface_hub", "diffusers", "transformers"):
            continue
        for attr in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE", "DIFFUSERS_CACHE"):
            if isinstance(getattr(module, attr, None), str):
                monkeypatch.setattr(module, attr, str(cache))


def _edit_tokenizer(snapshot: Path) -> None:
    """Another tokenizer in the snapshot (the text encoder's weights unchanged): its
    tokenizer_config.json edited (a cleanup rule a re-fetched snapshot may change)."""
    config = snapshot / "tokenizer" / "tokenizer_config.json"
    data = json.loads(config.read_text())
    data["clean_up_tokenization_spaces"] = not data.get("clean_up_tokenization_spaces", False)
    config.write_text(json.dumps(data))


@pytest.fixture
def hub(tiny_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hub"
    _use_hub_cache(cache, monkeypatch)
    return _hub_cache(tiny_model, cache)


def test_a_hub_tokenizer_is_fingerprinted_by_its_files(hub: Path) -> None:
    before = component_fingerprint(REPO, "tokenizer", None)
    old_rule = component_fingerprint(REPO, "tokenizer", None, rule=1)
    _edit_tokenizer(hub)
    assert component_fingerprint(REPO, "tokenizer", None) != before
    assert component_fingerprint(REPO, "tokenizer", None, rule=1) == old_rule  # the id alone: blind


def test_a_partly_downloaded_hub_base_is_not_on_disk(hub: Path) -> None:
    """A snapshot without one of the components its model_index.json names (the loaders fetch
    the rest) is fingerprinted again once loaded (identity_base.settle_base), not recorded as is."""
    from lorastudio.data.disk_cache import source_on_disk

    assert source_on_disk(REPO, None)
    shutil.rmtree(hub / "vae")
    assert not source_on_disk(REPO, None)
    (hub / "vae").mkdir()
    (hub / "model_index.json").unlink()
    assert not source_on_disk(REPO, None)


def test_a_changed_hub_tokenizer_gets_new_shards_and_refuses_the_resume(make_config, hub: Path) -> None:
    """RELIABILITY 450: a hub-cache tokenizer (no config.json) was fingerprinted by the hub id:
    a snapshot whose tokenizer changed reused caption shards tokenised the old way, and a resume
    onto it was not refused."""
    config = make_config(base_model=REPO, steps=3, latent_cache="disk")
    events, stop = stop_at(1)
    train(config, events.append, stop, device="cpu")
    root = cache_root(get_settings())
    text_before = {s.model for s in cache_stats(root) if s.kind == "text"}
    run_dir = get_settings().outputs_dir / "run"
    _edit_tokenizer(hub)
    with pytest.raises(ConfigError) as err:
        train(config, [].append, device="cpu", resume=run_dir)
    assert [p.field for p in err.value.problems] == ["base_model"]
    assert "(tokenizer changed)" in str(err.value)
    saved = read_checkpoint_info(find_checkpoint(run_dir))["identity"]
    assert saved["base_rule"] == 3 and saved["base_on_disk"] is True
    train(make_config(base_model=REPO, latent_cache="disk", output_name="again"), [].append, device="cpu")
    text_after = {s.model for s in cache_stats(root) if s.kind == "text"}
    assert text_after - text_before  # new shards for the new tokenizer


def test_an_old_rule_checkpoint_resumes_on_an_unchanged_hub_base(make_config, hub: Path) -> None:
    """A checkpoint written before the rule (its base fingerprint took a hub-cache tokenizer by
    the hub id; no base_rule, no parts) resumes on the same snapshot, and is still refused on
    a changed VAE."""
    from lorastudio.training.resume.identity_base import base_record

    config = make_config(base_model=REPO, steps=3)
    events, stop = stop_at(1)
    train(config, events.append, stop, device="cpu")
    run_dir = get_settings().outputs_dir / "run"
    checkpoint = find_checkpoint(run_dir)
    file = checkpoint / "identity.json"
    info = json.loads(file.read_text())
    identity = info["identity"]
    for key in ("base_rule", "base_parts", "base_on_disk"):
        del identity[key]
    identity["base_fingerprint"] = base_record(config, "transformer", rule=1)["base_fingerprint"]
    assert identity["base_fingerprint"] != base_record(config, "transformer")["base_fingerprint"]
    file.write_text(json.dumps(info))
    vae = next((hub / "vae").glob("*.safetensors"))
    kept = vae.read_bytes()
    vae.write_bytes(kept[:-1] + bytes([kept[-1] ^ 1]))
    with pytest.raises(ConfigError, match="the base model's weights differ"):
        train(config, [].append, device="cpu", resume=run_dir)
    vae.write_bytes(kept)
    assert train(config, [].append, device="cpu", resume=run_dir).resumed_from == 1


@pytest.fixture
def fetched_on_load(tiny_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """An online run on REPO, not in the hub cache: the preflight takes the hub id as is, and the
    first model load "downloads" the snapshot into the hub cache (the tiny FLUX.1 copied
    there, as huggingface_hub's download leaves it); the list holds the snapshot once fetched.
    Offline underneath (HF_HUB_OFFLINE): the loaders then read the cache."""
    from lorastudio.basemodels import resolve
    from lorastudio.families import common, loading

    cache = tmp_path / "hub"
    _use_hub_cache(cache, monkeypatch)
    monkeypatch.setattr(resolve, "hub_offline", lambda: False)
    fetched: list[Path] = []
    original = loading.quiet_loading

    def fetch_then_quiet() -> None:  # every loader calls it before from_pretrained
        if not fetched:
            fetched.append(_hub_cache(tiny_model, cache))
        original()

    monkeypatch.setattr(loading, "quiet_loading", fetch_then_quiet)
    monkeypatch.setattr(common, "quiet_loading", fetch_then_quiet)
    return fetched


def test_a_hub_base_fetched_by_the_loaders_is_keyed_by_its_content(make_config, fetched_on_load) -> None:
    """RELIABILITY 451: a run on a hub id not yet in the hub cache fingerprinted its text encoders
    and its base by the hub id before the loaders fetched it: its caption shards were keyed by
    the id (the next run, keying by content, re-encoded them) and its checkpoint recorded the id
    (a resume once the snapshot was there was refused: "the base model's weights differ")."""
    from lorastudio.data.text_keys import text_fingerprint

    config = make_config(base_model=REPO, steps=3, latent_cache="disk")
    events, stop = stop_at(1)
    train(config, events.append, stop, device="cpu")
    assert fetched_on_load  # fetched by the run's loaders
    root = cache_root(get_settings())
    assert {s.model for s in cache_stats(root) if s.kind == "text"} == {text_fingerprint(REPO, None)}
    run_dir = get_settings().outputs_dir / "run"
    saved = read_checkpoint_info(find_checkpoint(run_dir))["identity"]
    assert saved["base_on_disk"] is True
    result = train(config, [].append, device="cpu", resume=run_dir)  # the same base, now on disk
    assert result.resumed_from == 1
    _edit_tokenizer(fetched_on_load[0])  # and a changed one is refused once on disk
    with pytest.raises(ConfigError, match=r"tokenizer changed"):
        train(config.model_copy(update={"steps": 4}), [].append, device="cpu", resume=run_dir)


def test_an_old_checkpoint_of_a_hub_id_before_its_download_is_not_compared(
    make_config, tiny_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint written before the rule by a run whose hub base was not downloaded yet
    recorded the id's fingerprint, no content: resumed once the snapshot is here, it is not
    compared (it was refused: "the base model's weights differ"); another old fingerprint is."""
    from lorastudio.training.resume.identity import identity_problems
    from lorastudio.training.resume.identity_base import base_record, record_for

    cache = tmp_path / "hub"
    _use_hub_cache(cache, monkeypatch)
    config = make_config(base_model=REPO)
    before = base_record(config, "transformer", rule=1)  # as the old code took it, nothing on disk
    assert before["base_on_disk"] is False
    _hub_cache(tiny_model, cache)
    old = {"base_fingerprint": before["base_fingerprint"]}
    now = record_for(old, config, "transformer")
    assert now["base_fingerprint"] != old["base_fingerprint"] and now["base_on_disk"] is False
    assert identity_problems(old, now) == []
    other = {"base_fingerprint": "0" * 20}
    assert [p.field for p in identity_problems(other, record_for(other, config, "transformer"))] == [
        "base_model"
    ]
