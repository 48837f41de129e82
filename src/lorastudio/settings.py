"""Where lorastudio keeps things, and how the server listens.

The studio home (env LORASTUDIO_HOME, default ~/.lorastudio) holds:
  datasets/   one folder per dataset (images + .txt captions / metadata.jsonl)
  outputs/    one folder per run (LoRA .safetensors + sidecar JSON, checkpoints, samples)
  models/     local base models (diffusers pipeline folders), including the tiny demo models
  lorastudio.db   the run store (SQLite)
  caption-jobs/   one JSON record per caption job, the newest 50 (jobs/caption_records.py)
  generation-jobs/  one JSON record per asynchronous generation, the newest 200 (jobs/generation_records.py)
  added_models.json   folders the user added to the model catalogue
  cache/inductor/     torch.compile's on-disk cache (kernels, graphs), kept across runs and
                      reboots unless TORCHINDUCTOR_CACHE_DIR names another; its lorastudio-dynamo/
                      holds Dynamo's traced, guarded block graphs (training/speed/precompile.py; CUDA runs)
  cache/thumbs/       dataset thumbnails (JPEG), keyed by image path, inode, size, mtime
  cache/decoded/      per dataset folder, which images had every pixel decoded, by name, size,
                      mtime and inode (data/decoded.py): each is decoded fully once; <key>.json
                      and the journal of its later saves, <key>.journal (data/decoded_journal.py)
  cache/attention-probe/  attention_backend auto's probe results, keyed by GPU, driver,
                      torch / cuDNN / FA4 versions, dtype and shapes (training/speed/probe_cache.py)
  cache/fa4/          FlashAttention-4's compiled kernels (its JIT cache), shared by the probe
                      and the run unless FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED / _DIR are set
  cache/encoded/      VAE latents and caption embeddings of runs with latent_cache "disk" (data/disk_cache.py), kept across
                      runs; LORASTUDIO_CACHE_DIR puts them elsewhere; `lorastudio cache ls|clear|prune`;
                      LORASTUDIO_CACHE_MAX_GB caps it (least recently used entries go first)
  cache/text-signatures/  what each text encoder set gives per caption (names, dtypes, dims), learnt
                      from two probe captions: the cached text shards are checked against it

LORASTUDIO_CPU_DATA_PARALLEL=1 lets the job service run a num_gpus > 1 job as that many gloo
processes on the CPU (torchrun, like a multi-GPU job): for testing the launcher without GPUs.

The hub token (LORASTUDIO_HF_TOKEN) is a SecretStr: it prints as '**********' and only
`get_secret_value()` (in lorastudio.basemodels, handing it to huggingface_hub) reveals it. So is
the W&B API key (LORASTUDIO_WANDB_API_KEY; `serve` takes WANDB_API_KEY from its environment
too: jobs/childenv.drop_process_secrets), revealed only to wandb.init (training/trackers.py).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from lorastudio.errors import ConfigError, FieldProblem
from lorastudio.remote_access import origin_entry, root_path_entry
from lorastudio.settings_values import (
    BELOW_HOME_BYTES,
    _host_entry,
    default_home,
    expanded,
    folder_text_problem,
    hub_token_problem,
    path_max,
)
from lorastudio.user_paths import is_dir, make_home_folders, not_utf8

# Pillow's Image.open refuses an image over 2 x Image.MAX_IMAGE_PIXELS (its decompression-bomb
# error; the value is Pillow's, restated here so this module stays free of Pillow): the most
# max_image_pixels can honour.
PILLOW_MAX_PIXELS = 2 * (1024 * 1024 * 1024 // 4 // 3)
MAX_IMAGE_PIXELS_ENV = "LORASTUDIO_MAX_IMAGE_PIXELS"  # the setting's name where a refusal names it


class Settings(BaseSettings):
    """Process-wide settings, read from LORASTUDIO_* environment variables."""

    model_config = SettingsConfigDict(env_prefix="LORASTUDIO_", extra="forbid")

    home: Path = Field(default_factory=default_home)
    host: str = "127.0.0.1"
    port: int = Field(default=7860, ge=1, le=65535)
    api_token: str | None = Field(
        default=None,
        description="bearer token every API route requires; blank or whitespace-only counts as unset",
    )
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description=(
            "host names (or addresses) the server answers besides loopback, comma-separated in"
            " LORASTUDIO_ALLOWED_HOSTS; requests with another Host header get 421 (DNS rebinding)"
        ),
    )
    allowed_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="origins (scheme://host[:port]) whose pages may write besides the server's own (remote_access.py)",
    )
    root_path: str = Field(default="", description="sub-path a proxy that keeps it serves the studio under")
    max_upload_mb: int = Field(default=2048, ge=1)
    max_json_mb: int = Field(
        default=4, ge=1, le=1024, description="largest request body of every route but the uploads (413)"
    )
    max_image_pixels: int = Field(
        default=64_000_000,
        ge=1,
        le=PILLOW_MAX_PIXELS,
        description=(
            "largest image (width x height) a dataset, a reference or a caption job takes; at most"
            f" {PILLOW_MAX_PIXELS:,}, above which Pillow refuses to open an image (decompression bomb)"
        ),
    )
    max_decode_pixels: int = Field(
        default=4096 * 4096,
        ge=1,
        description=(
            "most pixels the server decodes at full size (checks, thumbnails; a WebP counts 4x):"
            " a PNG/WebP above it is checked from its header and chunk CRCs (a PNG's pixel stream"
            " inflated and measured) and previewed as a placeholder, a JPEG is decoded reduced;"
            " a WebP above it is decoded by the run's own scan (alone, before its models load);"
            " training decodes up to max_image_pixels in its worker"
        ),
    )
    hf_token: SecretStr | None = Field(
        default=None,
        description="hub token for gated/private repos and LoRA pushes (else huggingface_hub's own login)",
    )
    wandb_api_key: SecretStr | None = Field(
        default=None,
        description=(
            "Weights & Biases API key of the runs with report_to wandb (`serve` also takes WANDB_API_KEY"
            " from its environment, which it drops); else wandb's own login (~/.netrc: `wandb login`)"
        ),
    )
    wandb_identity_token_file: Path | None = Field(
        default=None,
        description=(
            "W&B identity token file (workload identity federation: a JWT file wandb exchanges for"
            " access) of the runs with report_to wandb; `serve` also takes WANDB_IDENTITY_TOKEN_FILE"
            " from its environment, which it drops (a TOKEN name). The path travels, the file is"
            " read by wandb in the run's worker"
        ),
    )
    server_nice: int = Field(
        default=10,
        ge=0,
        le=19,
        description=(
            "niceness added to the server's request-handling threads (the event loop and the threads"
            " it starts), so that under load they yield the CPU to training (the job dispatcher"
            " thread and the training workers keep the server's original priority); 0 = off"
        ),
    )
    cache_dir: Path | None = Field(
        default=None,
        description="folder of the on-disk encode cache (latent_cache = disk); default <home>/cache/encoded",
    )
    cache_max_gb: float | None = Field(
        default=None,
        ge=0,
        le=1_000_000,
        allow_inf_nan=False,  # `nan` was "less than or equal to 1000000" (RELIABILITY 2106)
        description=(
            "cap of the on-disk encode cache in GB (10^9 bytes): at a disk-cached run's end, a server's"
            " start and `lorastudio cache prune`, its least recently used entries not in use are removed"
            " until it fits (data/cache_prune.py); unset: 50 GB or half of the cache plus its disk's"
            " free space, whichever is smaller; 0 keeps only the entries in use"
        ),
    )
    worker_timeout_scale: float = Field(
        default=1.0,
        gt=0,
        le=1000,
        allow_inf_nan=False,
        description=(
            "factor on the time the generation and caption workers may take to start, load a model,"
            " generate an image or caption one, and a training run's step loop may stay silent,"
            " before they are stopped as hung"
            " (jobs/worker_allowance.py): raise it on a slow machine"
        ),
    )
    cpu_data_parallel: bool = Field(
        default=False,
        description="run num_gpus > 1 as gloo processes on the CPU: for testing the launcher",
    )
    prefetch_weights: bool = Field(
        default=True,
        description=(
            "a training run reads its base model's weight files into the page cache from its start,"
            " beside its imports and preflight (jobs/prefetch.py; bounded by the available memory)"
        ),
    )
    early_denoiser: bool = Field(
        default=True,
        description=(
            "a one-GPU training run copies its denoiser's weights beside the text encoders' and the"
            " VAE's work (training/speed/denoiser_early.py; FLUX.1 on an H100: 2.5 s less to the first step"
            " through the API, 4.6 s in a CLI run, bench/RESULTS.md note 44); off: after them, as before"
        ),
    )
    standby_worker: bool = Field(
        default=True,
        description=(
            "the server keeps one training worker process spawned in advance, its imports done"
            " (no GPU touched), for the next one-GPU job (jobs/standby.py)"
        ),
    )

    @field_validator("home", "cache_dir", mode="before")
    @classmethod
    def _absolute_folder(cls, value: object, info: ValidationInfo) -> object:
        """LORASTUDIO_HOME / LORASTUDIO_CACHE_DIR as an absolute folder: "~" expanded, a relative
        one taken against the current directory once (a server, its workers and the CLI agree);
        blank (`export LORASTUDIO_CACHE_DIR=`) is unset, never the current directory ("" was
        ".": the cache, and `cache clear`, in whatever folder the command ran in). A value that
        begins or ends with white space (a .env or compose file's stray space: `LORASTUDIO_HOME=
        /data`) is refused unless it names an existing folder: " /data" was a folder "  /data" made
        under the current directory, "/data " a second, empty home beside /data."""
        if isinstance(value, str) and not value.strip():
            return cls.model_fields[info.field_name or ""].get_default(call_default_factory=True)
        if isinstance(value, str) and (why := folder_text_problem(value)) and not is_dir(expanded(value)):
            raise ValueError(why)
        if isinstance(value, str | Path):
            return expanded(value)
        return value

    @field_validator("home", "cache_dir")
    @classmethod
    def _utf8_path(cls, value: Path | None) -> Path | None:
        """A home (cache folder) whose path is UTF-8 text. A path of other bytes (a folder named
        in Latin-1 by an old system) is held by Python as lone surrogates, which no config, run
        record or JSON answer can hold: `runs list`, `paths` and imports worked there, and then
        `train` died in a pydantic traceback ("data_dir: unable to parse raw data as a unicode
        string") and the server's start of a run likewise (RELIABILITY 1032)."""
        if value is not None and (why := not_utf8(value)) is not None:
            raise ValueError(
                f"{why}: the studio records its folders' paths as text in configs, its run database"
                " and its answers; give a folder whose path is UTF-8 (rename it)"
            )
        return value

    @field_validator("home", "cache_dir")
    @classmethod
    def _room_below(cls, value: Path | None) -> Path | None:
        """A home (cache folder) whose path leaves the studio's own files below it room under the
        file system's PATH_MAX: refused up front, naming the limit. Before, a home 4,039 bytes
        deep served and preflighted, and its run failed at its first cache write ("File name too
        long: <home>/cache/decoded/.<hash>.json.<pid>-<hex>.tmp")."""
        if value is None:
            return value
        limit = path_max(value)
        length = len(os.fsencode(str(value)))
        if length + BELOW_HOME_BYTES > limit - 1:
            raise ValueError(
                f"{value} is {length:,} bytes long; the studio writes paths of up to"
                f" {BELOW_HOME_BYTES} bytes below it and the system's limit on a path (PATH_MAX) is"
                f" {limit:,} bytes: give a folder of at most {limit - 1 - BELOW_HOME_BYTES:,} bytes"
            )
        return value

    @field_validator("api_token", mode="before")
    @classmethod
    def _blank_token_is_none(cls, value: object) -> object:
        """A token of only whitespace is no token (it must not allow a public bind); surrounding
        whitespace is dropped (the Authorization header's value is stripped too)."""
        if isinstance(value, str):
            return value.strip() or None
        return value

    @field_validator("hf_token", mode="before")
    @classmethod
    def _hub_token(cls, value: object) -> object:
        """LORASTUDIO_HF_TOKEN: surrounding whitespace dropped (a token file's newline, a .env's
        CR), blank is none; anything an HTTP header cannot carry is refused without echoing it
        (it went into an Authorization header, whose error quoted the token, or raised)."""
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if isinstance(value, str):
            value = value.strip() or None
            if value is not None and (problem := hub_token_problem(value)):
                raise ValueError(problem)
        return value

    @field_validator("wandb_api_key", mode="before")
    @classmethod
    def _wandb_key(cls, value: object) -> object:
        """LORASTUDIO_WANDB_API_KEY: surrounding whitespace dropped (wandb refuses a key with
        any), blank is none."""
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if isinstance(value, str):
            value = value.strip() or None
        return value

    @field_validator("wandb_identity_token_file", mode="before")
    @classmethod
    def _identity_file(cls, value: object) -> object:
        """LORASTUDIO_WANDB_IDENTITY_TOKEN_FILE: blank is none; a relative path is taken from the
        folder the studio started in (a worker may run elsewhere)."""
        if isinstance(value, str):
            value = value.strip() or None
        return expanded(value) if isinstance(value, (str, Path)) else value

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _split_hosts(cls, value: object) -> object:
        """Accept "a.example, b.example" (the environment variable) as well as a list; each
        entry is a host name or address without a port, compared case-insensitively."""
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple):
            return value
        hosts = [_host_entry(str(item)) for item in items if str(item).strip()]
        return hosts

    @field_validator("allowed_origins", mode="before")
    @classmethod
    def _split_origins(cls, value: object) -> object:
        """Accept "https://a.example, http://b.lan:8080" as well as a list (remote_access.origin_entry)."""
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple):
            return value
        return [origin_entry(str(item)) for item in items if str(item).strip()]

    @field_validator("root_path", mode="before")
    @classmethod
    def _root_path(cls, value: object) -> object:
        return root_path_entry(value) if isinstance(value, str) else value

    @property
    def datasets_dir(self) -> Path:
        return self.home / "datasets"

    @property
    def outputs_dir(self) -> Path:
        return self.home / "outputs"

    @property
    def models_dir(self) -> Path:
        return self.home / "models"

    @property
    def db_path(self) -> Path:
        return self.home / "lorastudio.db"

    @property
    def logs_dir(self) -> Path:
        """The training workers' own lines, one file per run (jobs/worker_log.py)."""
        return self.home / "logs"

    @property
    def thumbnail_cache_dir(self) -> Path:
        return self.home / "cache" / "thumbs"

    @property
    def decoded_record_dir(self) -> Path:
        """The records of which dataset images had every pixel decoded (data/decoded.py)."""
        return self.home / "cache" / "decoded"

    @property
    def compile_cache_dir(self) -> Path:
        return self.home / "cache" / "inductor"

    @property
    def probe_cache_dir(self) -> Path:
        return self.home / "cache" / "attention-probe"

    @property
    def text_signature_dir(self) -> Path:
        """What each text encoder set gives per caption, learnt by the runs of this home
        (training/inputs/text_signature.py): cached text shards are checked against it."""
        return self.home / "cache" / "text-signatures"

    @property
    def fa4_cache_dir(self) -> Path:
        return self.home / "cache" / "fa4"

    def ensure_dirs(self) -> Settings:
        """Create the home and its sub-folders if missing; returns self. A home that cannot be
        made (a container's HOME=/ for a uid of its own, a read-only root file system, a file
        where it or a folder above it goes) raises the OSError with LORASTUDIO_HOME named in its
        words (was a bare "Permission denied", "Not a directory" or "File exists")."""
        make_home_folders((self.home, self.datasets_dir, self.outputs_dir, self.models_dir))
        return self


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The settings of this process (cached; tests call `get_settings.cache_clear()`). Raises
    ConfigError naming each LORASTUDIO_* environment variable whose value is refused, every one
    at once (was pydantic's traceback: the CLI's and the server's start ended in it)."""
    try:
        return Settings()
    except ValidationError as err:
        raise ConfigError([_env_problem(item) for item in err.errors()]) from None


def _env_problem(item: object) -> FieldProblem:
    """A pydantic error item of Settings as a problem named by its environment variable."""
    loc = item.get("loc", ()) if isinstance(item, dict) else ()
    name = str(loc[0]) if loc else "settings"
    return FieldProblem(
        f"LORASTUDIO_{name.upper()}",
        str(item.get("msg", "invalid value") if isinstance(item, dict) else item).removeprefix(
            "Value error, "
        ),
    )
