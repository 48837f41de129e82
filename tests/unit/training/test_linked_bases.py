"""Base models laid out as the Hugging Face hub cache keeps them: each snapshot file a symlink
into `../../blobs/<sha256>` (a blob has no suffix). A single-file checkpoint named through such a
link (or any link) is vetted, trained and loaded by the name given, not by its blob's; a
pipeline snapshot of links is fingerprinted by its content, as a plain copy of it is."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from cli_runner import run_cli
from lorastudio.basemodels import resolve_base
from lorastudio.settings import get_settings
from single_files import write_transformer_file

COMMIT = "89abcdef0123456789abcdef0123456789abcdef"


def hub_layout(files: dict[str, Path], cache: Path, repo: str) -> Path:
    """`files` (name in the snapshot -> a file) as the hub cache stores `repo`: each a link into
    blobs/<sha256 of its bytes>, refs/main naming COMMIT. Returns the snapshot folder."""
    storage = cache / f"models--{repo.replace('/', '--')}"
    snapshot = storage / "snapshots" / COMMIT
    (storage / "blobs").mkdir(parents=True)
    (storage / "refs").mkdir()
    (storage / "refs" / "main").write_text(COMMIT)
    for name, source in files.items():
        data = source.read_bytes()
        blob = storage / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return snapshot


def use_hub_cache(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point the hub cache at `cache` for lorastudio (read at call time) and for the loaders
    (huggingface_hub, diffusers and transformers copy it into module constants when imported)."""
    import sys

    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] not in ("huggingface_hub", "diffusers", "transformers"):
            continue
        for attr in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE", "DIFFUSERS_CACHE"):
            if isinstance(getattr(module, attr, None), str):
                monkeypatch.setattr(module, attr, str(cache))


def test_a_single_file_in_the_hub_cache_trains_and_generates_by_its_link(
    tiny_model, tmp_path: Path, small_dataset, run_settings, capsys, monkeypatch
) -> None:
    """A FLUX.1 transformer file downloaded by `hf download` (snapshot/flux1.safetensors ->
    blobs/<sha>) was refused as "<blob> is not a .safetensors checkpoint": the path was resolved
    to its blob before the suffix check (and diffusers picks its reader by the suffix too)."""
    folder = tiny_model("flux")
    written = write_transformer_file(folder, tmp_path / "flux1.safetensors")
    snapshot = hub_layout({"flux1.safetensors": written}, tmp_path / "hub", "acme/flux1-file")
    linked = snapshot / "flux1.safetensors"
    assert linked.is_symlink() and not linked.resolve().name.endswith(".safetensors")

    found = resolve_base(str(linked), "flux", get_settings(), base_config=str(folder))
    assert found.source == str(linked) and found.file is not None and found.file.path == linked

    settings = run_settings("flux", linked, small_dataset, {"base_config": str(folder)})
    config = tmp_path / "run.toml"
    config.write_text("".join(f"{k} = {json_value(v)}\n" for k, v in settings.items()))
    code, out = run_cli(capsys, monkeypatch, "train", str(config), "--check", "--device", "cpu")
    assert code == 0, out
    assert f"single file    {linked} (FLUX.1" in out

    image = tmp_path / "out.png"
    code, out = run_cli(
        capsys, monkeypatch, "generate", "--base", str(linked), "--base-config", str(folder),
        "--prompt", "a red circle", "--out", str(image), "--steps", "1", "--width", "64",
        "--height", "64", "--device", "cpu",
    )  # fmt: skip
    assert code == 0, out
    assert image.is_file()


def json_value(value: object) -> str:
    import json

    return json.dumps(value)


def test_a_hub_snapshot_of_links_is_fingerprinted_by_its_content(
    tiny_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hub id, its snapshot folder given as a path and a plain copy of the pipeline give each
    present component the same content fingerprint (links followed, blobs read)."""
    from lorastudio.data.fingerprint import component_fingerprint, source_on_disk

    folder = tiny_model("flux")
    files = {str(p.relative_to(folder)): p for p in folder.rglob("*") if p.is_file()}
    snapshot = hub_layout(files, tmp_path / "hub", "acme/linked")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert source_on_disk("acme/linked", None) and source_on_disk(str(snapshot), None)
    for component in ("transformer", "vae", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2"):
        plain = component_fingerprint(str(folder), component, None)
        assert component_fingerprint("acme/linked", component, None) == plain, component
        assert component_fingerprint(str(snapshot), component, None) == plain, component


def test_generate_tells_the_family_of_a_hub_id_in_the_hub_cache(
    tiny_model, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`lorastudio generate --base acme/linked` (a hub id the hub cache holds, its files links
    into blobs/) without --family was "cannot tell the family of 'acme/linked'; pass --family":
    the family was read from a local folder's model_index.json only. One not cached still asks."""
    folder = tiny_model("flux")
    files = {str(p.relative_to(folder)): p for p in folder.rglob("*") if p.is_file()}
    hub_layout(files, tmp_path / "hub", "acme/linked")
    use_hub_cache(tmp_path / "hub", monkeypatch)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    args = ["--prompt", "a red circle", "--steps", "1", "--width", "64", "--height", "64", "--device", "cpu"]
    code, out = run_cli(
        capsys, monkeypatch, "generate", "--base", "acme/missing", "--out", str(tmp_path / "a.png"), *args
    )
    assert code == 2 and "cannot tell the family of 'acme/missing'; pass --family" in out
    code, out = run_cli(
        capsys, monkeypatch, "generate", "--base", "acme/linked", "--out", str(tmp_path / "b.png"), *args
    )
    assert code == 0, out
    assert (tmp_path / "b.png").is_file()
