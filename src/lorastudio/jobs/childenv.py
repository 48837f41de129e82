"""Secrets never reach a child process's environment.

A process's environment is fixed when it is exec'd: /proc/PID/environ shows it for the
process's life, whatever the process later removes from os.environ. So the secrets are kept out
of the children's environment before they start:

- `serve` calls `drop_process_secrets` once, right after the settings were read (they hold the
  API token and the hub token from then on) and before anything is started: every child of the
  server (the training workers, which multiprocessing's spawn starts with the server's own
  environment, its resource tracker, a torchrun launch) is built from an environment without
  them;
- `child_environment` is the environment handed explicitly to a child started with an `env=`
  (the torchrun launch, jobs/launcher.py), as a second line;
- a worker that needs the hub token (a run whose base model is a hub id, not a local folder)
  gets it inside WorkerArgs.settings (pickled over its spawn pipe or the rank channel, never
  through the environment) and `give_hub_token` holds it in that process's memory
  (lorastudio/hub_token.py), from where every hub call the studio makes is handed it as
  `token=`; it is never put in any os.environ (it was, as HF_TOKEN, until RELIABILITY 1120: the
  children a library starts from os.environ, Inductor's compile workers and wandb-core, then
  inherited it), so neither this worker's children nor theirs can see it; the children such a
  worker starts itself get `child_environment` besides (the attention probes,
  training/speed/attention.probe_environment: RELIABILITY 1011);
- a run with report_to wandb gets the W&B API key the same way, inside WorkerArgs.settings
  (`wandb_api_key`: LORASTUDIO_WANDB_API_KEY, or the WANDB_API_KEY `serve` had, kept by
  `drop_process_secrets`); the engine hands it to wandb.init's settings
  (training/trackers.py), never to an environment: not the worker's, nor the wandb-core
  service's it starts; a W&B identity token file likewise (`wandb_identity_token_file`:
  LORASTUDIO_WANDB_IDENTITY_TOKEN_FILE, or the WANDB_IDENTITY_TOKEN_FILE `serve` had: a path, the
  secret is the file's, which the worker's wandb reads).

Secret names: LORASTUDIO_API_TOKEN, LORASTUDIO_HF_TOKEN, HF_TOKEN, HUGGING_FACE_HUB_TOKEN, and any
name with a TOKEN, SECRET, PASSWORD, PASSWD, KEY, APIKEY or CREDENTIALS word (underscore
separated: GITHUB_TOKEN, AWS_SECRET_ACCESS_KEY, DB_PASSWORD, OPENAI_API_KEY; TOKENIZERS_PARALLELISM
is not one). No torch here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from pydantic import SecretStr

from lorastudio.hub_token import HUB_TOKEN_NAMES, hold_hub_token
from lorastudio.settings import Settings

SECRET_WORDS = frozenset({"TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "APIKEY", "CREDENTIALS"})
WANDB_KEY_NAME = "WANDB_API_KEY"  # what wandb reads (a KEY word: dropped like the others)
WANDB_IDENTITY_NAME = "WANDB_IDENTITY_TOKEN_FILE"  # wandb's identity token file (a TOKEN word: dropped)


def is_secret(name: str) -> bool:
    """Whether environment variable `name` may hold a secret (see the module docstring)."""
    upper = name.upper()
    return upper in {"LORASTUDIO_API_TOKEN", "LORASTUDIO_HF_TOKEN", *HUB_TOKEN_NAMES} or bool(
        SECRET_WORDS.intersection(upper.split("_"))
    )


def child_environment(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of `env` without any secret, for a child process started with it."""
    return {name: value for name, value in env.items() if not is_secret(name)}


def drop_secrets(env: MutableMapping[str, str]) -> list[str]:
    """Remove every secret from `env`; returns the removed names (sorted)."""
    removed = sorted(name for name in env if is_secret(name))
    for name in removed:
        del env[name]
    return removed


def drop_process_secrets(settings: Settings) -> Settings:
    """Remove every secret from this process's environment (so from every child it starts from
    now on). Returns `settings` with the hub token kept: the studio's own (LORASTUDIO_HF_TOKEN,
    already read), else the HF_TOKEN / HUGGING_FACE_HUB_TOKEN the environment had (which the
    hub client would have read there); and the W&B API key likewise: LORASTUDIO_WANDB_API_KEY,
    else the environment's WANDB_API_KEY (which wandb would have read there), and the W&B
    identity token file: LORASTUDIO_WANDB_IDENTITY_TOKEN_FILE, else WANDB_IDENTITY_TOKEN_FILE
    (made absolute against this process's folder)."""
    if settings.hf_token is None:
        found = next((os.environ[n] for n in HUB_TOKEN_NAMES if os.environ.get(n)), None)
        if found:
            settings = settings.model_copy(update={"hf_token": SecretStr(found)})
    if settings.wandb_api_key is None and (key := os.environ.get(WANDB_KEY_NAME, "").strip()):
        settings = settings.model_copy(update={"wandb_api_key": SecretStr(key)})
    if settings.wandb_identity_token_file is None and (
        file := os.environ.get(WANDB_IDENTITY_NAME, "").strip()
    ):
        settings = settings.model_copy(
            update={"wandb_identity_token_file": Path(file).expanduser().absolute()}
        )
    drop_secrets(os.environ)
    return settings


def give_hub_token(settings: Settings, base_model: str | None) -> bool:
    """In a worker, after its start (and in a generation worker before each job): remove any
    secret it was started with (a worker started by an embedding process that kept them), then
    hold the studio's hub token in this process's memory (hub_token.hold_hub_token: every hub
    call is handed it as `token=`) when the job loads from the hub (`base_model` is not a local
    folder), else hold none. Never writes any environment. Returns whether it held one."""
    drop_secrets(os.environ)
    if settings.hf_token is None or not base_model or Path(base_model).expanduser().is_dir():
        hold_hub_token(None)
        return False
    hold_hub_token(settings.hf_token.get_secret_value())
    return True
