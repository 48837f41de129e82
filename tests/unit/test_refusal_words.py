"""Refusals that name the field the user set wrong, with its own cause (session 36 messages
audit): each row a wrong input and the (field, words) its refusal must carry."""

from __future__ import annotations

import errno
import json
import os
import socket
from pathlib import Path

import pytest

from cli_runner import run_cli_streams
from lorastudio.basemodels.resolve import family_free_problem
from lorastudio.cli.serve_cmd import listen_problem
from lorastudio.config import parse_train_config, resolve_train_config
from lorastudio.data.captions import read_sidecar
from lorastudio.errors import ConfigError, DatasetError, writing
from lorastudio.jobs.generation_check import check_request
from lorastudio.jobs.generation_inputs import GenerationRequest
from lorastudio.settings import Settings

BASE = {"family": "flux", "base_model": "owner/model", "data_dir": "mydata"}

# a side under two of the family's multiples passed the config and was refused by the dataset
# scan under data_dir ("resolution 32 is smaller than 64 (2 x 32)"), a field nobody set wrong
SIDES = [
    ({"family": "sdxl", "resolution": 32}, "resolution", "must be at least 64 for sdxl"),
    ({"resolution": 16}, "resolution", "must be at least 32 for flux"),
    ({"resolution": [16, 512]}, "resolution", "must be at least 32 for flux"),
    ({"resolution": 40}, "resolution", "must be a multiple of 16 for flux"),
    (
        {"data_dir": None, "datasets": [{"path": "a", "resolution": 16}]},
        "datasets.0.resolution",
        "must be at least 32 for flux",
    ),
]


@pytest.mark.parametrize(("over", "field", "words"), SIDES)
def test_a_side_the_family_cannot_train_names_its_setting(over: dict, field: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_train_config(parse_train_config({**BASE, **over}))
    assert [(p.field, words in p.message) for p in info.value.problems] == [(field, True)]


def test_the_smallest_sides_still_train() -> None:
    for family, side in (("flux", 32), ("sdxl", 64)):
        assert resolve_train_config(parse_train_config({**BASE, "family": family, "resolution": side}))


def test_a_base_wrong_for_every_family_is_named_not_its_family(studio_home: Path, tmp_path: Path) -> None:
    """`lorastudio generate --base B` without --family asked for --family when B did not exist
    or was no pipeline ("cannot tell the family of '/tmp/x'; pass --family"): passing one only
    moved the refusal. What is wrong with B whatever its family is said instead."""
    settings = Settings(home=studio_home)
    (tmp_path / "plain").mkdir()
    for name, pipeline in (("sd15", "StableDiffusionPipeline"), ("flux", "FluxPipeline")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model_index.json").write_text(json.dumps({"_class_name": pipeline}))
    rows = [
        (str(tmp_path / "gone"), f"base model folder not found: {tmp_path / 'gone'}"),
        ("gone", "'gone' is neither a pipeline folder or checkpoint file"),
        ("../up", "use an absolute path, a name under models/, or a hub id"),
        (str(tmp_path / "plain"), "is not a diffusers pipeline folder (no model_index.json)"),
        ("owner/repo", None),  # a hub id not in the hub cache: only --family can say
        (str(tmp_path / "sd15"), "StableDiffusionPipeline"),
        (str(tmp_path / "flux"), None),  # a pipeline of a family: that family judges the rest
    ]
    for base, words in rows:
        got = family_free_problem(base, settings)
        assert got is None if words is None else got is not None and words in got, (base, got)


def test_generate_names_the_missing_base(
    studio_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = tmp_path / "gone"
    args = ["generate", "--base", str(gone), "--prompt", "x", "--out", str(tmp_path / "a.png")]
    code, _, err = run_cli_streams(capsys, monkeypatch, *args)
    assert code == 2 and f"--base: base model folder not found: {gone}" in err, err
    assert "--family" not in err and "Traceback" not in err


def test_serve_names_a_port_in_use_before_it_says_it_serves(
    studio_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A port in use: `serve` printed "lorastudio serving on http://127.0.0.1:PORT/", started its
    job service, then uvicorn's bare "[Errno 98] error while attempting to bind on address"."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, out, err = run_cli_streams(capsys, monkeypatch, "serve", "--port", str(port))
    assert (code, out) == (3, ""), (code, out, err)
    assert f"error: cannot listen on http://127.0.0.1:{port}/: port {port} is in use" in err
    assert "pass --port with a free port" in err and "Errno" not in err


def test_serve_names_an_address_of_another_machine() -> None:
    why = listen_problem("192.0.2.1", 7860)  # TEST-NET-1: never this machine's
    assert why is not None and "192.0.2.1 is not an address of this machine; pass --host" in why
    assert listen_problem("127.0.0.1", 0) is None  # any free port binds


@pytest.mark.parametrize(
    ("where", "words"),
    [("file/home", "a folder on the studio home's path is a file"), ("file", "a file is where a folder")],
)
def test_a_home_on_a_file_names_the_variable(tmp_path: Path, where: str, words: str) -> None:
    """A file where the home or a folder above it goes: the bare "Not a directory" / "File
    exists" of mkdir, without the words that say which setting to change."""
    (tmp_path / "file").write_text("x")
    with pytest.raises(OSError, match="set LORASTUDIO_HOME to a writable folder") as caught:
        Settings(home=tmp_path / where).ensure_dirs()
    assert caught.value.filename == str(tmp_path / where) and words in str(caught.value)


def test_a_generations_base_is_named_with_its_other_problems(studio_home: Path, tmp_path: Path) -> None:
    """A generation's base model that does not resolve was a ModelSourceError without a field
    (the Generate form showed it in its banner, not at the base model's input), and only once
    every other problem was fixed: now `base_model` with the rest, as the training preflight."""
    settings = Settings(home=studio_home)
    req = GenerationRequest(family="sdxl", base_model=str(tmp_path / "gone"), prompt="x", width=48, height=64)
    with pytest.raises(ConfigError) as info:
        check_request(settings, req)
    assert [p.field for p in info.value.problems] == ["width", "base_model"]
    assert "base model folder not found" in info.value.problems[1].message


def test_generate_exits_1_when_its_image_cannot_be_written(
    studio_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """README: a command exits 1 when it could not do it (a write refused: the file-size limit, a
    read-only folder); `generate` exited 2 for every domain error, its image's WriteFailed too."""

    def refused(*args: object) -> None:
        with writing("the image a.png could not be written", tmp_path / "a.png"):
            raise OSError(errno.EFBIG, os.strerror(errno.EFBIG), str(tmp_path / "a.png"))

    monkeypatch.setattr("lorastudio.cli.generate_cmd._generate", refused)
    args = ["generate", "--base", "b", "--prompt", "x", "--out", str(tmp_path / "a.png")]
    code, _, err = run_cli_streams(capsys, monkeypatch, *args)
    assert code == 1 and "error: write failed: the image a.png could not be written" in err, (code, err)


BIG = "x" * 100_000
# pydantic's words that said another thing than the rule, or a value echoed whole
WORDS = [
    ({"trigger_word": "x" * 201}, "trigger_word", "String should have at most 200 characters"),
    ({"default_caption": "x" * 2001}, "default_caption", "String should have at most 2000 characters"),
    (
        {"data_dir": None, "datasets": [{"path": "a", "trigger_word": "x" * 201}]},
        "datasets.0.trigger_word",
        "String should have at most 200 characters",
    ),
    ({"revision": "a..b"}, "revision", "'a..b' is not a branch, tag or commit"),  # no "Value error, "
    ({"family": BIG}, "family", "unknown model family 'xxxx"),
    ({BIG: 1}, "x" * 200 + "... (100,000 characters)", "unknown setting"),
]


@pytest.mark.parametrize(("over", "field", "words"), WORDS, ids=[str(i) for i in range(len(WORDS))])
def test_a_settings_refusal_says_its_rule_in_bounded_words(over: dict, field: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_train_config({**BASE, **over})
    assert [p.field for p in info.value.problems] == [field]
    message = info.value.problems[0].message
    assert message.startswith(words) or f" {words}" in message, message
    assert len(str(info.value)) < 1000 and "Value error" not in message


def test_an_unreadable_dataset_file_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A caption or image the studio's user may not read: a bare "shape_02.txt: Permission
    denied" before; now with READ_ADVICE's words, as a copy's read failure says them. The
    refusal is faked: the suite may run as root, whom permissions do not bind."""
    caption = tmp_path / "a.txt"
    caption.write_text("a cat")
    real_open = os.open

    def refused(path: object, flags: int, *args: object, **kwargs: object) -> int:
        if path == "a.txt":
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), "a.txt")
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("lorastudio.data.safe_open.os.open", refused)
    with pytest.raises(DatasetError) as info:
        read_sidecar(caption)
    assert info.value.problems == [
        "a.txt: Permission denied; the user running the studio may not read it: give that user read"
        " permission on it, then retry"
    ]


def test_an_unknown_device_names_the_ones_that_train() -> None:
    """`--device tpu` listed torch's every device type ("Expected one of cpu, cuda, ipu, xpu,
    mkldnn, opengl, opencl, ... device type at start of device string: tpu"), none of which but
    two trains here."""
    from lorastudio.training.precision import pick_device

    with pytest.raises(ConfigError) as info:
        pick_device("tpu")
    assert [str(p) for p in info.value.problems] == ["device: unknown device 'tpu': use cpu, cuda or cuda:N"]
