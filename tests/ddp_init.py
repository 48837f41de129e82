"""The init-lora scenario of the data-parallel launches (tests/ddp_launch.py): a run started from
a LoRA file (init_lora) on every rank, and a record of what each rank loaded."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lorastudio.config import TrainConfig
from lorastudio.training.loop import train


def init_config(make_config: Callable[..., TrainConfig], init_file: Path, **overrides: object) -> TrainConfig:
    """The init-lora scenario's run: 2 steps of batch 2 from the LoRA `init_file` (its rank)."""
    return make_config(steps=2, batch_size=2, lora_rank=None, init_lora=str(init_file), **overrides)


def write_init_file(make_config: Callable[..., TrainConfig], path: Path) -> Path:
    """The LoRA the init-lora scenario starts from: a 1-step FLUX.1 run at a large learning rate
    (its lora_B far from zero), trained in a studio home of its own beside `path`."""
    from lorastudio.settings import Settings

    home = Settings(home=path.parent / "init-source-home").ensure_dirs()
    cfg = make_config(steps=1, learning_rate=5e-2, lora_alpha=8.0, output_name="init-source")
    made = train(cfg, [].append, device="cpu", settings=home).lora_path
    assert made is not None
    shutil.copyfile(made, path)
    return path


@contextlib.contextmanager
def recorded_init(out: Path) -> Any:
    """While open, every load_init_lora (training/planning/plan_build's, imported at the call) also writes
    the adapter's weights just after the load to `out` (peft names): what this rank holds at step 0."""
    from safetensors.torch import save_file

    from lorastudio.training.adapters import init_lora
    from lorastudio.training.adapters.lora import lora_state_dict

    real = init_lora.load_init_lora

    def recording(denoiser: Any, *args: Any, **kwargs: Any) -> Any:
        loaded = real(denoiser, *args, **kwargs)
        save_file({k: v.detach().cpu().contiguous() for k, v in lora_state_dict(denoiser).items()}, str(out))
        return loaded

    init_lora.load_init_lora = recording  # type: ignore[assignment]
    try:
        yield
    finally:
        init_lora.load_init_lora = real  # type: ignore[assignment]


def init_rank_main(rank: int, cfg: TrainConfig, port: int, out: str) -> None:
    """The init-lora scenario of a launched process: a plain train() (ddp_launch's `_rank_main`)
    that records the adapter each rank loaded (out/init{rank}.safetensors)."""
    from ddp_launch import _rank_main

    with recorded_init(Path(out, f"init{rank}.safetensors")):
        _rank_main(rank, cfg, port, out)
