"""RELIABILITY 1120: a run from a hub id hands the studio's hub token to each hub call (`token=`)
and never puts it in an environment, so a child a library starts from os.environ (Inductor's
compile workers: torch._inductor.utils.python_subprocess_env copies it) cannot see it.

The hub is a hand-made hub cache holding the tiny FLUX.1 as "acme/flux" (offline: the loaders
read the cache through huggingface_hub's own download functions, which build the request
headers with the token they were given: huggingface_hub.utils._headers.get_token_to_send is
what every request's Authorization comes from, spied on here)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import SecretStr

from lorastudio import hub_token
from lorastudio.jobs.childenv import give_hub_token
from lorastudio.settings import get_settings
from lorastudio.training.loop import train

COMMIT = "0123456789abcdef0123456789abcdef01234567"
REPO = "acme/flux"
SECRET = "hf_run_secret_0123456789"


def _hub_cache(tiny_model: Callable[[str], Path], cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tiny FLUX.1 as the hub cache `cache` keeps REPO, the cache pointed at for lorastudio
    and the loaders (which copied HF_HUB_CACHE into module constants at their import)."""
    storage = cache / "models--acme--flux"
    shutil.copytree(tiny_model("flux"), storage / "snapshots" / COMMIT)
    (storage / "refs").mkdir()
    (storage / "refs" / "main").write_text(COMMIT)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] in ("huggingface_hub", "diffusers", "transformers"):
            for attr in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE", "DIFFUSERS_CACHE"):
                if isinstance(getattr(module, attr, None), str):
                    monkeypatch.setattr(module, attr, str(cache))


def _spy_on_hub_tokens(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The token each hub request is handed (huggingface_hub's get_token_to_send, which every
    request's Authorization comes from), in order."""
    from huggingface_hub.utils import _headers

    given: list[object] = []
    real = _headers.get_token_to_send

    def spy(token: bool | str | None) -> str | None:
        given.append(token)
        return real(token)

    monkeypatch.setattr(_headers, "get_token_to_send", spy)
    return given


def test_a_hub_run_hands_every_hub_call_its_token_and_no_child_sees_it(
    make_config, tiny_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's start (give_hub_token) then a tiny run from the hub id: every request header
    huggingface_hub built got the token as an argument (it used to find none and read HF_TOKEN
    from os.environ), the process's environment holds no hub token, and a child started as
    Inductor starts its compile workers does not see it in its /proc/self/environ."""
    from torch._inductor.utils import python_subprocess_env

    monkeypatch.setattr(os, "environ", dict(os.environ))  # this test process's own stays as it is
    monkeypatch.setattr(hub_token, "_held", None)
    _hub_cache(tiny_model, tmp_path / "hub", monkeypatch)
    given = _spy_on_hub_tokens(monkeypatch)
    settings = get_settings().model_copy(update={"hf_token": SecretStr(SECRET)})
    assert give_hub_token(settings, REPO)  # what every worker does first (jobs/worker.prepare_child)
    train(make_config(base_model=REPO, steps=1), [].append, device="cpu")
    assert given and set(given) == {SECRET}  # each hub call the run made was handed the token
    assert SECRET not in os.environ.values()
    assert not {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"} & set(os.environ)
    child = subprocess.run(
        ["cat", "/proc/self/environ"], env=python_subprocess_env(), capture_output=True, check=True
    )
    assert SECRET.encode() not in child.stdout and b"HF_HUB_CACHE=" in child.stdout  # the rest reached it


def test_a_worker_holding_the_hub_token_starts_an_inductor_style_child_without_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker's start alone: the token is held for the hub calls (hub_kwargs), and a child
    started from os.environ as Inductor starts its pool does not get it (it got HF_TOKEN)."""
    from torch._inductor.utils import python_subprocess_env

    monkeypatch.setattr(os, "environ", dict(os.environ))
    monkeypatch.setattr(hub_token, "_held", None)
    settings = get_settings().model_copy(update={"hf_token": SecretStr(SECRET)})
    assert give_hub_token(settings, REPO)
    child = subprocess.run(
        ["cat", "/proc/self/environ"], env=python_subprocess_env(), capture_output=True, check=True
    )
    assert SECRET.encode() not in child.stdout and b"PATH=" in child.stdout
    assert hub_token.hub_kwargs() == {"token": SECRET}  # the hub calls still get it


@pytest.mark.parametrize("command", ["train", "generate"])
def test_the_cli_hands_lorastudio_hf_token_to_its_hub_calls(
    command: str, run_settings, small_dataset, tiny_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RELIABILITY 1121: `lorastudio train` and `generate` load in the CLI's own process, and
    nothing handed them LORASTUDIO_HF_TOKEN: their hub calls got no token (huggingface_hub then
    read only HF_TOKEN and its login), so a gated hub id was refused with the studio's token
    set. Now each hub request of a whole one-step run / one image (spied on) is handed the
    token, and it is not copied to HF_TOKEN."""
    from typer.testing import CliRunner

    from lorastudio.cli.app import _register, app

    _register()
    monkeypatch.setattr(os, "environ", dict(os.environ))
    monkeypatch.setattr(hub_token, "_held", None)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("LORASTUDIO_HF_TOKEN", SECRET)
    get_settings.cache_clear()
    _hub_cache(tiny_model, tmp_path / "hub", monkeypatch)
    given = _spy_on_hub_tokens(monkeypatch)
    if command == "train":
        config = tmp_path / "run.json"
        config.write_text(json.dumps(run_settings("flux", REPO, small_dataset, {"steps": 1})))
        args = ["train", str(config), "--device", "cpu"]
    else:
        args = [
            "generate",
            "--base",
            REPO,
            "--family",
            "flux",
            "--prompt",
            "p",
            "--out",
            str(tmp_path / "i.png"),
        ]
        args += ["--device", "cpu", "--steps", "1", "--width", "64", "--height", "64"]
    result = CliRunner().invoke(app, args)
    get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    assert given and set(given) == {SECRET}  # every hub request of the command was handed it
    assert not {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"} & set(os.environ)  # not copied to the hub client's


def test_the_cli_takes_the_hub_token_out_of_its_environment_once_held(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """RELIABILITY 1183: `lorastudio train` / `generate` run in the user's shell environment, and
    a LORASTUDIO_HF_TOKEN or HF_TOKEN exported there stayed in the CLI's os.environ, so the
    children a library starts from it (Inductor's compile workers) inherited it. Now the CLI holds
    it and takes the names out; a `--gpus N` launch hands its ranks the held token."""
    from torch._inductor.utils import python_subprocess_env

    monkeypatch.setattr(hub_token, "_held", None)
    for studio, shell, expected in (
        (SECRET, "hf_shell_other", SECRET),
        (None, "hf_shell_only", "hf_shell_only"),
    ):
        monkeypatch.setattr(os, "environ", dict(os.environ))
        if studio is None:
            monkeypatch.delenv("LORASTUDIO_HF_TOKEN", raising=False)
        else:
            monkeypatch.setenv("LORASTUDIO_HF_TOKEN", studio)
        monkeypatch.setenv("HF_TOKEN", shell)
        monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", shell)
        get_settings.cache_clear()
        try:
            assert hub_token.hold_studio_hub_token()
        finally:
            get_settings.cache_clear()
        assert hub_token.hub_kwargs() == {"token": expected}  # the LORASTUDIO one first
        assert not {"LORASTUDIO_HF_TOKEN", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"} & set(os.environ)
        child = subprocess.run(
            ["cat", "/proc/self/environ"], env=python_subprocess_env(), capture_output=True
        )
        assert shell.encode() not in child.stdout and expected.encode() not in child.stdout
        assert hub_token.rank_environment() == {"LORASTUDIO_HF_TOKEN": expected}
