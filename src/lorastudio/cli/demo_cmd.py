"""`lorastudio demo [--family F] [--steps N]`: the whole path on a tiny offline model.

Builds the tiny model (models/tiny-<family>) and the sample dataset (datasets/sample; for an
edit family the paired one, datasets/sample-paired, and the first control as the reference) in the
studio home, trains a short run through exactly the same `train()` a real run uses, generates
one image without and one with the LoRA (PNGs in the run folder) and prints where it all is.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

from lorastudio.cli.safe_output import plain_console
from lorastudio.cli.termination import refusal_status
from lorastudio.config_datasets import top_resolution
from lorastudio.errors import LorastudioError

if TYPE_CHECKING:
    from PIL import Image

DEMO_DATASET = "sample"
DEMO_PAIRED_DATASET = "sample-paired"  # families that take control images


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_cmd)


def demo_config(family: str, base_model: Path, steps: int, output_name: str) -> dict[str, Any]:
    """Raw settings of the demo run: small resolution (2 x the family's multiple, at least
    32 px), high learning rate so a few steps visibly change the model, short text."""
    from lorastudio import families

    spec = families.get(family).spec
    raw: dict[str, Any] = {
        "family": family,
        "base_model": str(base_model),
        "data_dir": DEMO_PAIRED_DATASET if spec.edit_model else DEMO_DATASET,
        "output_name": output_name,
        "steps": steps,
        "resolution": max(32, 2 * spec.resolution_multiple),
        "batch_size": 2,
        "learning_rate": 5e-3,
        "lora_rank": 8,
        "seed": 0,
    }
    if "max_sequence_length" in spec.supports:
        raw["max_sequence_length"] = 32
    if spec.edit_model:  # the pipelines' ~1 MP controls would dwarf the 32 px targets of a demo
        raw["control_resolution"] = "target"
    return raw


def _save_png(image: Image.Image, path: Path) -> None:
    """Write a PNG via a staging name, then rename."""
    staging = path.with_name(f".{path.name}.partial")
    image.save(staging, format="PNG")
    os.replace(staging, path)


def demo_cmd(
    family: str = typer.Option("flux", "--family", help="a registered family (`lorastudio families`)"),
    steps: int = typer.Option(30, "--steps", min=1, max=10_000, help="training steps"),
) -> None:
    """Train a short LoRA on a tiny built-in model and generate with it (offline, CPU is fine)."""
    console = plain_console(stderr=True, log_path=False)
    try:
        _run_demo(family, steps, console)
    except LorastudioError as err:
        typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(refusal_status(err)) from None


def _run_demo(family: str, steps: int, console: Console) -> None:
    import torch

    from lorastudio import families
    from lorastudio.cli.run_display import ProgressDisplay, StopOnInterrupt, WarningLines, quiet_libraries
    from lorastudio.config import parse_train_config
    from lorastudio.generate import apply_loras, generate_image, load_pipeline
    from lorastudio.settings import get_settings
    from lorastudio.tiny import make_sample_dataset, save_tiny_model, tiny_model_dir
    from lorastudio.training.loop import train

    quiet_libraries()
    families.get(family)  # UnknownFamily before anything is built
    if not torch.cuda.is_available():
        # the tiny models are too small to gain from threads, and lose a lot on a busy CPU
        torch.set_num_threads(1)
    settings = get_settings().ensure_dirs()
    display = ProgressDisplay(console)
    display.say(f"building the tiny {family} model and the sample dataset")
    model = save_tiny_model(family, tiny_model_dir(family, settings.models_dir))
    paired = families.get(family).spec.edit_model  # FLUX.2 (optional references): text-to-image
    if paired:
        from lorastudio.tiny.paired import make_paired_dataset

        dataset = make_paired_dataset(settings.datasets_dir / DEMO_PAIRED_DATASET)
    else:
        dataset = make_sample_dataset(settings.datasets_dir / DEMO_DATASET)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    cfg = parse_train_config(demo_config(family, model, steps, f"demo-{family}-{stamp}"))
    with StopOnInterrupt(console) as stopper, display, WarningLines():  # its warnings as `warning:` lines
        result = train(cfg, display.emit, stopper.check, settings=settings)
    if result.lora_path is None:
        typer.echo(f"stopped after {result.steps_run} step(s); nothing saved")
        return
    caption = sorted(dataset.glob("*.txt"))[0]
    prompt = caption.read_text(encoding="utf-8").strip()
    size = top_resolution(cfg.resolution)
    extra = (
        {"max_sequence_length": 32} if "max_sequence_length" in families.get(family).spec.supports else None
    )
    pipe = load_pipeline(str(model), family)
    kwargs: dict[str, Any] = {"prompt": prompt, "seed": 0, "steps": 4, "width": size, "height": size}
    if paired:  # edit the target's own reference image
        from lorastudio.data.images import load_rgb

        kwargs["controls"] = [load_rgb(dataset / "control" / f"{caption.stem}.png")]
    base = generate_image(pipe, family, extra=extra, **kwargs)
    apply_loras(pipe, [(result.lora_path, 1.0)])
    tuned = generate_image(pipe, family, extra=extra, **kwargs)
    run_dir = result.lora_path.parent
    _save_png(base, run_dir / "sample_base.png")
    _save_png(tuned, run_dir / "sample_lora.png")
    diff = _mean_abs_difference(base, tuned)
    losses = result.losses
    typer.echo(f"demo done: {family}, {result.steps_run} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    typer.echo(f"base model   {model}")
    typer.echo(f"dataset      {dataset}")
    typer.echo(f"LoRA         {result.lora_path}")
    typer.echo(f"sidecar      {result.lora_path.with_suffix('.json')}")
    typer.echo(
        f"images       {run_dir / 'sample_base.png'} (without) / {run_dir / 'sample_lora.png'} (with LoRA)"
    )
    typer.echo(f"prompt       {prompt!r}; mean pixel change with the LoRA: {diff:.2f} / 255")


def _mean_abs_difference(a: Image.Image, b: Image.Image) -> float:
    import numpy as np

    return float(np.abs(np.asarray(a, dtype=np.float32) - np.asarray(b, dtype=np.float32)).mean())
