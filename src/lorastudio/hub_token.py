"""The hub token of this process, held in memory and handed to each hub call as `token=`.

A worker whose run, generation or captioning loads from a hub id gets the studio's hub token in
its pickled settings (jobs/childenv.give_hub_token). It used to put it in its own os.environ as
HF_TOKEN, which huggingface_hub reads when a call gets no token; but every child a library starts
from os.environ then inherits it in its /proc/PID/environ (Inductor's compile workers:
torch._inductor copies os.environ into its subprocess pool; W&B's wandb-core service). Now the
token is held here, never in any environment, and every hub call the studio makes in such a
process is handed it: `hub_kwargs()` is spread into each from_pretrained / from_single_file /
load_config / hf_hub_download (families/, training/, generate/, captioning/), which pass it on
to huggingface_hub (diffusers' and transformers' loaders forward `token=` to every download and
model_info they make; a DiffusionPipeline downloads its folder with it before loading the
components from disk).

Why a process-wide value and not an argument threaded through every loader: one worker process
serves one run (or one generation or caption job at a time), the loaders' signatures are shared
by every family, and the token is a fact of the process, set once after the worker starts.
Processes that make hub calls with their settings at hand (the server's fetches, hub_push, the
catalogue, the captioning CLI) pass settings.hf_token themselves; `lorastudio train` and
`generate`, which load models in the CLI's own process, hold it too (`hold_studio_hub_token`)
and take the hub token names out of their own os.environ once read (RELIABILITY 1183: the user's
shell exported them, and the children a library starts from os.environ inherited them); the
ranks of a `train --gpus N` launch are handed the held token in their environment
(`rank_environment`), and each rank takes it out of its own likewise.
No torch, no huggingface_hub.
"""

from __future__ import annotations

import os

HUB_TOKEN_NAMES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")  # what huggingface_hub reads
STUDIO_TOKEN_NAME = "LORASTUDIO_HF_TOKEN"  # settings.hf_token's

_held: str | None = None


def hold_hub_token(token: str | None) -> None:
    """Make `token` (None: none) the hub token this process hands its hub calls."""
    global _held
    _held = token or None


def held_hub_token() -> str | None:
    """The hub token this process holds (None: none; the hub client then uses its own login)."""
    return _held


def hub_kwargs() -> dict[str, str]:
    """`{"token": <the held token>}` for a hub call, or {} when none is held (the call then
    falls back to huggingface_hub's own login, as before)."""
    return {"token": _held} if _held else {}


def hold_studio_hub_token() -> bool:
    """In a CLI command that loads models in its own process (`lorastudio train`, `generate`):
    hold the studio's hub token (settings.hf_token: LORASTUDIO_HF_TOKEN), else the HF_TOKEN /
    HUGGING_FACE_HUB_TOKEN of the user's shell (which huggingface_hub would have read there), for
    its hub calls, as a worker holds it; then remove all three from this process's os.environ, so
    no child started from it later (Inductor's compile workers, wandb-core) inherits them
    (RELIABILITY 1183). With none set, nothing is held and the calls use huggingface_hub's login
    (`hf auth login`'s token file). Returns whether it held one."""
    from lorastudio.settings import get_settings

    token = get_settings().hf_token
    found = token.get_secret_value() if token is not None else None
    found = found or next(
        (os.environ[n].strip() for n in HUB_TOKEN_NAMES if os.environ.get(n, "").strip()), None
    )
    for name in (STUDIO_TOKEN_NAME, *HUB_TOKEN_NAMES):
        os.environ.pop(name, None)
    if not found:
        return False
    hold_hub_token(found)
    return True


def rank_environment() -> dict[str, str]:
    """What a `train --gpus N` launch adds to its ranks' environment: the held token as
    LORASTUDIO_HF_TOKEN (each rank's own `hold_studio_hub_token` reads it and takes it out of
    that rank's os.environ), or {} when none is held."""
    return {STUDIO_TOKEN_NAME: _held} if _held else {}
