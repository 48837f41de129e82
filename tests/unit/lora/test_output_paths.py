"""Where `lora convert` / `merge` / `resize` write: a destination they cannot write (a missing
folder, a folder, a name over the file system's limit, a read-only folder) or one that loaders
would not read as safetensors (diffusers tells the format by the .safetensors suffix; any other
name is unpickled) is refused before anything is read or written, naming the path and the reason;
before, a missing folder or a long name ended in a SafetensorError / OSError traceback and `x.txt`
was written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from lorastudio.errors import ConfigError, ModelSourceError
from lorastudio.lora.convert import PeftLora
from lorastudio.lora.files import convert_file, file_for_layout, write_lora_file
from lorastudio.lora.ops import merge_files, resize_file
from lorastudio.user_paths import output_file_problem

KEY = "single_transformer_blocks.0.attn.to_q"


def _lora(path: Path, family: str = "flux") -> Path:
    g = torch.Generator().manual_seed(0)
    sd = {
        f"{KEY}.lora_A.weight": torch.randn(4, 32, generator=g),
        f"{KEY}.lora_B.weight": torch.randn(32, 4, generator=g),
    }
    tensors, header = file_for_layout(
        PeftLora(sd, 4, 4.0), family, "diffusers", {"lorastudio.family": family}
    )
    return write_lora_file(path, tensors, header)


def _bad_destinations(tmp_path: Path) -> list[tuple[Path, str]]:
    folder = tmp_path / "a-folder.safetensors"
    folder.mkdir()
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    read_only.chmod(0o555)
    cases = [
        (tmp_path / "missing" / "x.safetensors", f"the folder {tmp_path / 'missing'} does not exist"),
        (folder, f"{folder} is a folder"),
        (tmp_path / ("y" * 300 + ".safetensors"), "the file name is longer than the 230 bytes allowed"),
        (tmp_path / "x.txt", "x.txt: name the file .safetensors"),
    ]
    if os.geteuid() != 0:  # root writes anywhere
        cases.append((read_only / "x.safetensors", f"cannot write in the folder {read_only}"))
    return cases


def test_every_command_refuses_a_destination_it_cannot_write(tmp_path: Path) -> None:
    src = _lora(tmp_path / "src.safetensors")
    other = _lora(tmp_path / "other.safetensors")
    before = sorted(p.name for p in tmp_path.iterdir())
    for dst, said in _bad_destinations(tmp_path):
        for run in (
            lambda dst=dst: convert_file(src, dst, to="kohya"),
            lambda dst=dst: merge_files([(src, 0.5), (other, 0.5)], dst),
            lambda dst=dst: resize_file(src, dst, 2),
        ):
            with pytest.raises(ConfigError) as info:
                run()
            assert [p.field for p in info.value.problems] == ["out"]
            assert said in info.value.problems[0].message, info.value.problems[0].message
    after = sorted(p.name for p in tmp_path.iterdir())
    assert after == sorted({*before, "a-folder.safetensors", "read-only"})
    assert not list((tmp_path / "a-folder.safetensors").iterdir())


def test_generate_refuses_an_out_it_cannot_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`lorastudio generate --out` answers from the same check (was an OSError traceback for a
    name over the file system's limit)."""
    import sys

    from lorastudio.cli.app import main

    for out, said in [
        (tmp_path / ("y" * 300 + ".png"), "the file name is longer than the 230 bytes allowed"),
        (tmp_path / "missing" / "a.png", f"the folder {tmp_path / 'missing'} does not exist"),
        (tmp_path / "a.gif", "a.gif: name the file .png or .jpg or .jpeg or .webp"),
    ]:
        args = ["lorastudio", "generate", "--base", str(tmp_path / "none"), "--family", "flux"]
        monkeypatch.setattr(sys, "argv", [*args, "--prompt", "x", "--out", str(out)])
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_:
            main()
        printed = "".join(capsys.readouterr()).replace("\n", "")
        assert exit_.value.code == 2 and said in printed and "Traceback" not in printed, printed
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_destination_that_appears_while_the_command_works_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_model
) -> None:
    """Without --force / --overwrite, a file another process writes at the destination while
    the command works (a second `generate --out` of the same name, a save by hand) is kept and
    the command refuses naming it; before, the final rename replaced it. Two commands writing
    one destination each stage under a name of their own (generate's was one fixed name)."""
    import safetensors.torch
    from typer.testing import CliRunner

    import lorastudio.generate as generate
    from lorastudio.cli.app import _register, app

    src, other = _lora(tmp_path / "a.safetensors"), _lora(tmp_path / "b.safetensors")
    real_save = safetensors.torch.save_file

    def save_then_race(tensors, filename, metadata=None):
        real_save(tensors, filename, metadata=metadata)
        dst.write_bytes(b"the other writer's file")

    monkeypatch.setattr(safetensors.torch, "save_file", save_then_race)
    for i, run in enumerate(
        (
            lambda dst: convert_file(src, dst, "kohya", "flux"),
            lambda dst: merge_files([(src, 0.5), (other, 0.5)], dst),
            lambda dst: resize_file(src, dst, 2),
        )
    ):
        dst = tmp_path / f"out{i}.safetensors"
        with pytest.raises(ConfigError) as info:
            run(dst)
        assert [p.field for p in info.value.problems] == ["out"]
        assert (
            "appeared while" in info.value.problems[0].message and "--force" in info.value.problems[0].message
        )
        assert dst.read_bytes() == b"the other writer's file"
    monkeypatch.setattr(safetensors.torch, "save_file", real_save)

    real_generate = generate.generate_image
    out = tmp_path / "img.png"

    def generate_then_race(*args, **kwargs):
        image = real_generate(*args, **kwargs)
        out.write_bytes(b"the other writer's image")
        return image

    monkeypatch.setattr(generate, "generate_image", generate_then_race)
    _register()
    args = ["generate", "--base", str(tiny_model("flux")), "--prompt", "p", "--out", str(out), "--steps", "1"]
    result = CliRunner().invoke(app, [*args, "--width", "32", "--height", "32", "--device", "cpu"])
    assert result.exit_code == 2, result.output
    assert "appeared while" in result.output and "--overwrite" in result.output
    assert out.read_bytes() == b"the other writer's image"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_family_the_file_contradicts_is_refused(tmp_path: Path) -> None:
    """`--family qwen-image` on a file whose header says flux wrote a FLUX.1 LoRA relabelled as
    a Qwen-Image (or Z-Image, Chroma) kohya file; convert, merge and resize now give the file
    the generation check (lora.header.check_lora_file) for the family they write. A family that
    writes another's layout (Chroma: FLUX.1's) was "unknown" to merge and resize: its LoRAs
    merge and resize now, as convert took them."""
    from lorastudio.errors import ModelSourceError

    src = _lora(tmp_path / "a.safetensors")  # header: lorastudio.family = flux
    dst = tmp_path / "out.safetensors"
    for family in ("qwen-image", "z-image", "chroma"):
        with pytest.raises(ModelSourceError, match=f"is not a {family} LoRA: it is a flux one"):
            convert_file(src, dst, "kohya", family)
        with pytest.raises(ModelSourceError, match=f"is not a {family} LoRA: it is a flux one"):
            merge_files([(src, 0.5), (src, 0.5)], dst, family)
    assert not dst.exists()
    convert_file(src, dst, "kohya", "flux")  # the file's own family
    assert dst.is_file()
    chroma = _lora(tmp_path / "c.safetensors", "chroma")
    merge_files([(chroma, 0.5), (chroma, 0.5)], tmp_path / "cm.safetensors")
    resize_file(chroma, tmp_path / "cr.safetensors", 2)
    with pytest.raises(ConfigError, match="different families: chroma, flux"):
        merge_files([(chroma, 0.5), (src, 0.5)], tmp_path / "mixed.safetensors")


def test_a_merge_of_mixed_families_or_layouts_is_refused_from_the_headers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Families, layouts and a contradicting --family are told by the files' headers: a merge
    that cannot be is refused before any tensor is read (each input was read whole, NaN check
    included, before: minutes for large files)."""
    import lorastudio.lora.ops as ops

    flux, chroma = _lora(tmp_path / "a.safetensors"), _lora(tmp_path / "c.safetensors", "chroma")
    kohya = tmp_path / "k.safetensors"
    convert_file(flux, kohya, "kohya")

    def no_read(path):
        raise AssertionError(f"{path} was read before the merge was refused")

    monkeypatch.setattr(ops, "read_lora_file", no_read)
    out = tmp_path / "m.safetensors"
    with pytest.raises(ConfigError, match="different families: chroma, flux"):
        merge_files([(flux, 0.5), (chroma, 0.5)], out)
    with pytest.raises(ConfigError, match="different layouts"):
        merge_files([(flux, 0.5), (kohya, 0.5)], out)
    with pytest.raises(ModelSourceError, match="is not a qwen-image LoRA"):
        merge_files([(flux, 0.5), (flux, 0.5)], out, "qwen-image")
    assert not out.exists()


def test_a_folder_on_a_read_only_file_system_is_named_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`lora convert|merge|resize --out` into a read-only mount said "(permission denied)"
    (os.access is a plain False for EROFS too; root's permissions pass): RELIABILITY 1075."""

    class ReadOnly:
        f_flag = os.ST_RDONLY

    monkeypatch.setattr(os, "access", lambda path, mode: False)  # what access(2) gives on a read-only mount
    monkeypatch.setattr(os, "statvfs", lambda path: ReadOnly)
    problem = output_file_problem(tmp_path / "x.safetensors", (".safetensors",), False, "--force")
    assert problem == f"cannot write in the folder {tmp_path} (a read-only file system)"
