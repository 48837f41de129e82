"""safetensors reports every failure to open a file as "No such file or directory" (EACCES
included): the studio names the true reason, "Permission denied: PATH" (RELIABILITY 950)."""

from __future__ import annotations

import errno
import os

import pytest
import torch
from safetensors.torch import save_file

from lorastudio.errors import ConfigError, ModelSourceError
from lorastudio.open_reason import library_open_reason


def _denied(monkeypatch, path) -> None:
    """os.open of `path` fails EACCES (a root test process reads every file whatever its mode)."""
    real = os.open

    def fake(name, *args, **kwargs):
        if os.fspath(name) == str(path):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real(name, *args, **kwargs)

    monkeypatch.setattr(os, "open", fake)


def test_the_reason_of_a_file_safetensors_could_not_open_is_the_systems(tmp_path, monkeypatch) -> None:
    missing, there = tmp_path / "gone.safetensors", tmp_path / "lora.safetensors"
    save_file({"a": torch.ones(2)}, str(there))
    said = FileNotFoundError(f"No such file or directory: {there}")  # what safetensors raises for EACCES
    _denied(monkeypatch, there)
    assert library_open_reason(said) == f"Permission denied: {there}"
    gone = FileNotFoundError(f"No such file or directory: {missing}")
    assert library_open_reason(gone) == f"No such file or directory: {missing}"  # truly missing
    real = PermissionError(errno.EACCES, "Permission denied", "x")  # the system's own: as it is
    assert library_open_reason(real) == str(real)
    monkeypatch.undo()
    assert library_open_reason(said) == str(said)  # it opens now: the library's text


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file of mode 000")
def test_an_unreadable_checkpoint_and_lora_say_permission_denied(tmp_path) -> None:
    from lorastudio.lora.file_read import read_lora_file
    from lorastudio.training.resume.snapshot import load_checkpoint

    (tmp_path / "ck").mkdir()
    weights = tmp_path / "ck" / "lora.safetensors"
    save_file(
        {"transformer.x.lora_A.weight": torch.ones(1, 2), "transformer.x.lora_B.weight": torch.ones(2, 1)},
        str(weights),
    )
    weights.chmod(0)
    with pytest.raises(ConfigError, match=rf"cannot read checkpoint .*: Permission denied: {weights}"):
        load_checkpoint(tmp_path / "ck", None, None)  # type: ignore[arg-type]  (refused before they are used)
    with pytest.raises(ModelSourceError, match="Permission denied"):
        read_lora_file(weights)


def test_a_resume_names_the_reason_safetensors_hid(tmp_path, monkeypatch) -> None:
    """The resume's reader as it ran for a second user of a 0600 checkpoint (fix 901): safetensors'
    ENOENT for the EACCES that os.open meets (both emulated: the tests may run as root)."""
    import safetensors.torch

    from lorastudio.training.resume.snapshot import load_checkpoint

    (tmp_path / "ck").mkdir()
    weights = tmp_path / "ck" / "lora.safetensors"
    save_file({"a": torch.ones(2)}, str(weights))

    def hidden(name, *args, **kwargs):
        raise FileNotFoundError(f"No such file or directory: {name}")

    monkeypatch.setattr(safetensors.torch, "load_file", hidden)
    _denied(monkeypatch, weights)
    with pytest.raises(ConfigError, match=rf"cannot read checkpoint .*: Permission denied: {weights}"):
        load_checkpoint(tmp_path / "ck", None, None)  # type: ignore[arg-type]  (refused before they are used)


def test_a_base_component_transformers_could_not_open_names_the_true_reason(
    tiny_model, tmp_path, monkeypatch
) -> None:
    """transformers opens a text encoder's weights with safetensors' safe_open and lets its error
    through: a base model's weights another user could not read (0600) said "No such file or
    directory" although they are there (RELIABILITY 1283). Now the load's error gives the
    system's reason. EACCES emulated (the suite may run as root): safetensors' own error for it,
    and os.open's."""
    import shutil

    import transformers.modeling_utils as modeling_utils
    from transformers import CLIPTextModel

    from lorastudio.families.loading import load_component

    base = tmp_path / "flux"
    shutil.copytree(tiny_model("flux") / "text_encoder", base / "text_encoder")
    weights = base / "text_encoder" / "model.safetensors"
    real_open = modeling_utils.safe_open

    def safe_open(path, *args, **kwargs):  # as safetensors answers an EACCES
        if os.fspath(path) == str(weights):
            raise FileNotFoundError(f"No such file or directory: {weights}")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(modeling_utils, "safe_open", safe_open)
    _denied(monkeypatch, weights)
    with pytest.raises(ModelSourceError) as refused:
        load_component(CLIPTextModel, str(base), "text_encoder", None)
    assert f"Permission denied: {weights}" in str(refused.value), refused.value
    assert "No such file or directory" not in str(refused.value)
