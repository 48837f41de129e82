"""Fingerprint rule 3 (data/fingerprint.py, RELIABILITY 920): a component the base does not have
(FLUX.1's text_encoder_3 / tokenizer_3) is a fixed marker, not `hub:<the base's name>`, so the
same files named by a folder path, a copy, a moved home or as a hub id give the same caption-shard
key and gallery base identity; a checkpoint of rule 2 still resumes (compared under its rule) and
the resumed run records rule 3; a gallery image's identity of rule 2 is still accepted."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lorastudio.data.disk_cache import cache_root, cache_stats, component_fingerprint
from lorastudio.data.fingerprint import RULE
from lorastudio.data.text_keys import text_fingerprint, text_key, text_parts
from lorastudio.errors import ConfigError
from lorastudio.settings import Settings, get_settings
from lorastudio.training.loop import train
from lorastudio.training.resume.checkpoint import find_checkpoint, read_checkpoint_info
from stop_at import stop_at

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _as_hub_cache(model: Path, cache: Path, repo: str = "acme/flux") -> Path:
    """`model` as the hub cache `cache` keeps `repo` (snapshot COMMIT, refs/main); its snapshot."""
    storage = cache / f"models--{repo.replace('/', '--')}"
    snapshot = storage / "snapshots" / COMMIT
    shutil.copytree(model, snapshot)
    (storage / "refs").mkdir()
    (storage / "refs" / "main").write_text(COMMIT)
    return snapshot


def _caption_key(source: str) -> str:
    parts = text_parts("flux", text_fingerprint(source, None), "float32", "cpu", 16)
    return text_key(parts, "a red circle")


def test_the_same_files_under_any_name_give_one_caption_key(
    tiny_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caption-shard key of the tiny FLUX.1 by its folder, a copy, a moved folder, its hub id
    and its snapshot folder is one key (rule 2: a key per name, captions encoded once more)."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    folder = tmp_path / "home" / "models" / "tiny"
    shutil.copytree(tiny_model("flux"), folder)
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    snapshot = _as_hub_cache(folder, tmp_path / "hub")
    key = _caption_key(str(folder))
    assert {_caption_key(str(s)) for s in (copy, snapshot, "acme/flux")} == {key}
    moved = tmp_path / "moved home" / "models" / "tiny"
    folder.parent.parent.rename(moved.parent.parent)
    assert _caption_key(str(moved)) == key
    absent = component_fingerprint(str(moved), "text_encoder_3", None)
    old = {component_fingerprint(str(s), "text_encoder_3", None, rule=2) for s in (copy, moved)}
    assert len(old) == 2 and absent not in old  # what rule 2 took: the base's name

    # content not here yet stays named by the id: a hub id not in the cache, and a component a
    # snapshot's model_index.json names but its folder is missing (the loaders fetch it)
    assert component_fingerprint("acme/other", "text_encoder_3", None) != absent
    shutil.rmtree(snapshot / "text_encoder_2")
    partial = component_fingerprint("acme/flux", "text_encoder_2", None)
    assert partial == component_fingerprint("acme/flux", "text_encoder_2", None, rule=2)
    assert partial != component_fingerprint(str(copy), "text_encoder_2", None)
    assert component_fingerprint("acme/flux", "text_encoder_3", None) == absent


def test_a_gallery_identity_is_the_same_after_a_home_move_and_an_old_rule_one_is_accepted(
    tiny_model, tmp_path: Path
) -> None:
    """A models/ base in a home and in the same home moved has one gallery identity (rule 2: the
    image's settings sent again after the move were "no longer the one"); an image's identity of
    rule 2 (made before this rule, same place) is accepted, another base's refused."""
    from lorastudio.basemodels import resolve_base
    from lorastudio.jobs.generation_base import base_identities, check_identity

    old, new = tmp_path / "old home", tmp_path / "new home"
    shutil.copytree(tiny_model("flux"), old / "models" / "my-flux")
    base = resolve_base("my-flux", "flux", Settings(home=old))
    before = base_identities(base, "transformer", None)
    rule2 = base_identities(base, "transformer", None, rule=2)
    assert rule2 != before and None not in before
    assert check_identity(rule2[0], base, "transformer", None, "my-flux") == (before[0], None)
    assert check_identity(rule2[1], base, "transformer", None, "my-flux")[1] is None  # files identity
    old.rename(new)
    moved = resolve_base("my-flux", "flux", Settings(home=new))
    assert base_identities(moved, "transformer", None) == before
    assert check_identity(before[0], moved, "transformer", None, "my-flux") == (before[0], None)
    vae = new / "models" / "my-flux" / "vae" / "config.json"
    vae.write_text(json.dumps({**json.loads(vae.read_text()), "scaling_factor": 0.5}))
    for asked in (before[0], rule2[0]):
        now, problem = check_identity(asked, moved, "transformer", None, "my-flux")
        assert problem is not None and problem.field == "base_identity" and now != before[0]


def test_a_hub_base_has_its_folders_gallery_identity_and_its_scheduler_is_read(
    tiny_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hub id in the hub cache has the gallery identity of its snapshot folder and of a copy of
    it (rule 2: its scheduler, which has no config.json, by the hub id), and its scheduler's files
    are read: one edited in the snapshot changes the identity (rule 2: unchanged, the image's
    settings sent again rendered with another scheduler under the old identity)."""
    from lorastudio.basemodels import resolve_base
    from lorastudio.jobs.generation_base import base_identities, check_identity

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    copy = tmp_path / "copy"
    shutil.copytree(tiny_model("flux"), copy)
    snapshot = _as_hub_cache(copy, tmp_path / "hub")
    settings = Settings(home=tmp_path / "home")
    hub = resolve_base("acme/flux", "flux", settings)
    identity = base_identities(hub, "transformer", None)
    assert {
        base_identities(resolve_base(str(s), "flux", settings), "transformer", None) for s in (snapshot, copy)
    } == {identity}
    old = base_identities(hub, "transformer", None, rule=2)
    assert old != identity and check_identity(old[0], hub, "transformer", None, "acme/flux")[1] is None
    config = snapshot / "scheduler" / "scheduler_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "shift": 1.0}))
    now, problem = check_identity(identity[0], hub, "transformer", None, "acme/flux")
    assert now != identity[0] and problem is not None and problem.field == "base_identity"


def test_a_rule_2_checkpoint_resumes_on_its_base_moved_and_reads_the_caption_shards(
    make_config, tiny_model, tmp_path: Path
) -> None:
    """A checkpoint of rule 2 (its absent components by the base's name) resumes on the same files
    moved (compared under rule 2, those parts set aside: fix 801), is refused on another VAE, reads
    the caption shards the first run wrote (one key for both names) and records rule 3 after."""
    from lorastudio.training.resume.identity_base import base_record

    folder = tmp_path / "models" / "tiny"
    shutil.copytree(tiny_model("flux"), folder)
    config = make_config(base_model=str(folder), steps=3, latent_cache="disk", save_every=1)
    events, stop = stop_at(1)
    train(config, events.append, stop, device="cpu")
    run_dir = get_settings().outputs_dir / "run"
    file = find_checkpoint(run_dir) / "identity.json"
    info = json.loads(file.read_text())
    assert info["identity"]["base_rule"] == RULE == 3
    info["identity"].update(base_record(config, "transformer", rule=2))  # as the code of rule 2 wrote it
    file.write_text(json.dumps(info))
    root = cache_root(get_settings())
    shards = sorted(p for p in root.rglob("*.safetensors") if p.relative_to(root).parts[0] == "text")
    assert shards

    moved = tmp_path / "moved" / "tiny"
    moved.parent.mkdir()
    folder.rename(moved)
    other = tmp_path / "other"
    shutil.copytree(moved, other)
    vae = other / "vae" / "config.json"
    vae.write_text(json.dumps({**json.loads(vae.read_text()), "scaling_factor": 0.5}))
    with pytest.raises(ConfigError, match=r"\(vae changed\)"):
        train(config.model_copy(update={"base_model": str(other)}), [].append, device="cpu", resume=run_dir)

    again = config.model_copy(update={"base_model": str(moved)})
    assert train(again, [].append, device="cpu", resume=run_dir).resumed_from == 1
    assert sorted(p for p in root.rglob("*.safetensors") if p.relative_to(root).parts[0] == "text") == shards
    assert {s.model for s in cache_stats(root) if s.kind == "text"} == {shards[0].parent.parent.name}
    saved = read_checkpoint_info(find_checkpoint(run_dir))["identity"]
    assert saved["base_rule"] == 3 and saved["base_on_disk"] is True
