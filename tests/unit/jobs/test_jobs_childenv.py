"""jobs/childenv.py: which variables are secrets, and the torchrun launch's environment (the
agent and its ranks) built without them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lorastudio.jobs.childenv import child_environment, drop_process_secrets, is_secret
from lorastudio.jobs.torchrun_launch import rank_environment
from lorastudio.settings import Settings

SECRETS = ["LORASTUDIO_API_TOKEN", "LORASTUDIO_HF_TOKEN", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "GITHUB_TOKEN",
           "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "OPENAI_API_KEY", "my_secret", "GOOGLE_APPLICATION_CREDENTIALS"]  # fmt: skip
NOT_SECRETS = ["TOKENIZERS_PARALLELISM", "PATH", "HF_HOME", "HF_HUB_OFFLINE", "MONKEY", "CUDA_VISIBLE_DEVICES",
               "LORASTUDIO_HOME", "LORASTUDIO_RANK_CHANNEL", "KEYBOARD_LAYOUT"]  # fmt: skip


def test_secret_names() -> None:
    assert [n for n in SECRETS if not is_secret(n)] == []
    assert [n for n in NOT_SECRETS if is_secret(n)] == []
    env = {n: "x" for n in SECRETS + NOT_SECRETS}
    assert sorted(child_environment(env)) == sorted(NOT_SECRETS)


def test_the_torchrun_launch_gets_no_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SECRETS:
        monkeypatch.setenv(name, "s3cret")
    env = rank_environment(None, "/x/channel.sock")  # what TorchrunWorker launches the ranks with
    assert [n for n in env if is_secret(n) or env[n] == "s3cret"] == []
    assert env["LORASTUDIO_RANK_CHANNEL"] == "/x/channel.sock" and env["CUDA_VISIBLE_DEVICES"] == ""


def test_the_server_keeps_the_hub_token_it_drops_from_its_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "environ", {"HF_TOKEN": "hf_env", "GITHUB_TOKEN": "g", "PATH": "/bin"})
    kept = drop_process_secrets(Settings())
    assert os.environ == {"PATH": "/bin"}
    assert kept.hf_token is not None and kept.hf_token.get_secret_value() == "hf_env"
