"""The checks `lorastudio train` runs before it trains, and `train --check`'s report.

`check_run` validates a CLI config exactly as the job service does (jobs/validation.validate_run:
config, base model, dataset, output name, precision and host, every problem at once), with the
CLI's freedoms: a dataset folder anywhere, and `--overwrite` to replace a previous run's
outputs; and, as the engine's preflight, the adapter targets on the denoiser's meta skeleton. A taken output name is refused with a message naming `--overwrite` and a free name.
`print_report` prints the preflight report (jobs/preflight.preflight_report, what POST
/api/train/preflight returns) as lines a user reads.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import typer

from lorastudio.cgroup_limits import shm_problems
from lorastudio.errors import ConfigError, FieldProblem, writing
from lorastudio.settings import Settings
from lorastudio.user_paths import lexists


def free_name(name: str, outputs: Path) -> str:
    """The first of NAME-2, NAME-3, ... with no folder in `outputs`."""
    n = 2
    while lexists(outputs / f"{name}-{n}"):
        n += 1
    return f"{name}-{n}"


def gpu_count_problems(num_gpus: int, device: str | None) -> list[FieldProblem]:
    """A data-parallel CLI run needs num_gpus CUDA GPUs, unless --device cpu runs its ranks as
    gloo processes on the CPU, and room in /dev/shm for NCCL (cgroup_limits.shm_problems)."""
    if num_gpus <= 1 or device == "cpu":
        return []
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count >= num_gpus:
        return shm_problems(num_gpus)  # NCCL's buffers in /dev/shm (a container's 64 MB)
    return [
        FieldProblem(
            "num_gpus",
            f"{num_gpus} processes need {num_gpus} CUDA GPUs, but this host has {count}; use fewer, "
            "or --device cpu to run them as gloo processes on the CPU",
        )
    ]


def device_problems(device: str | None) -> list[FieldProblem]:
    """`--device` checked as the run's start checks it (training.precision.pick_device): a CUDA
    device on a host without one, a GPU index past the host's, a device type the engine does not
    run; [] for None (the run picks) and a device this host has."""
    if device is None:
        return []
    from lorastudio.training.precision import pick_device

    try:
        pick_device(device, "--device")
    except ConfigError as err:
        return list(err.problems)
    return []


def _init_in_replaced_folder(value: object, name: str, settings: Settings) -> list[FieldProblem]:
    """An init_lora file inside the output folder `--overwrite` replaces: refused, never removed
    with it before the run that starts from it (training/adapters/init_lora_rules.in_run_folder)."""
    from lorastudio.errors import LorastudioError
    from lorastudio.training.adapters.init_lora_rules import in_run_folder, init_lora_path

    if not isinstance(value, str) or not value:
        return []
    try:
        path = init_lora_path(value, settings)
    except (LorastudioError, OSError):
        return []  # not found: the verdict says so
    problem = in_run_folder(path, name, settings)
    return [problem] if problem is not None else []


def check_run(data: dict[str, Any], settings: Settings, *, overwrite: bool, device: str | None) -> Any:
    """Validate a CLI run's settings like the job service; returns the ValidatedRun.

    With `overwrite`, an output folder of that name does not count against the run (the caller
    removes it: replace_outputs). Raises ConfigError listing every problem; a taken output_name
    is explained with `--overwrite` and a free name."""
    from lorastudio.jobs.validation import validate_run
    from lorastudio.training.verdict import target_problems, targets_beside

    # the GPU count is checked with the CLI's own terms (gpu_count_problems: --device cpu)
    settings = settings.model_copy(update={"cpu_data_parallel": True})
    num_gpus = data.get("num_gpus")
    launch = gpu_count_problems(num_gpus, device) if isinstance(num_gpus, int) else []
    launch = device_problems(device) + launch  # `--check --device cuda` said "would train" on a CPU host
    name = data.get("output_name")
    taken = isinstance(name, str) and name not in ("", ".", "..") and "/" not in name
    taken = taken and lexists(settings.outputs_dir / name)  # never raises: the field refuses a long name
    raw = dict(data)
    if taken and overwrite:
        raw["output_name"] = free_name(name, settings.outputs_dir)  # validated as if free
        launch += _init_in_replaced_folder(data.get("init_lora"), str(name), settings)
    try:
        run = validate_run(raw, settings, live_output_names=set(), allow_outside_root=True, device=device)
    except ConfigError as err:
        problems = [
            _explain(p, name, settings) if taken and p.field == "output_name" else p for p in err.problems
        ]
        raise ConfigError(problems + launch + targets_beside(raw, settings, problems)) from None
    if launch:
        raise ConfigError(launch)
    if targets := target_problems(run.config):
        raise ConfigError(targets)
    if taken and overwrite:  # the report names the folder the run replaces
        run = dataclasses.replace(run, config=run.config.model_copy(update={"output_name": name}))
    return run


def _explain(problem: FieldProblem, name: str, settings: Settings) -> FieldProblem:
    folder = settings.outputs_dir / name
    return FieldProblem(
        "output_name",
        f"{folder} already exists (a previous run's outputs); pass --overwrite to replace it, "
        f"or choose a free name: --set output_name={free_name(name, settings.outputs_dir)}",
    )


def replace_outputs(name: str, settings: Settings) -> Path | None:
    """Remove outputs/NAME (a previous run's folder) for `--overwrite`; returns the folder
    removed, or None when there was none. A link is removed, never followed. A folder that is a
    mount point is refused (ConfigError) before anything in it is removed: the folder itself
    cannot go (EBUSY), so its files would be lost and the run still refused. A failed removal is
    WriteFailed / NoSpaceLeft naming the folder. A mount point that holds nothing is left as it is
    (None): the run writes into it (RELIABILITY 1187)."""
    from lorastudio.training.resume.run_lock import empty_mount_point

    folder = settings.outputs_dir / name
    if empty_mount_point(folder):
        return None
    if not folder.is_symlink() and os.path.ismount(folder):
        raise ConfigError(
            [
                FieldProblem(
                    "output_name",
                    f"{folder} is a mount point (another file system mounted on it): --overwrite cannot "
                    "replace it, and nothing in it was removed; unmount it, or choose another output_name",
                )
            ]
        )
    with writing(f"the outputs of {name} could not be removed for --overwrite", folder):
        if folder.is_symlink() or folder.is_file():
            folder.unlink()
            return folder
        if folder.is_dir():
            shutil.rmtree(folder)
            return folder
    return None


def print_report(report: dict[str, Any]) -> None:
    """Print the preflight report: settings, dataset, schedule, precision and plan, memory, warnings."""
    cfg = report["config"]
    echo = typer.echo
    echo("would train (nothing was loaded or written):")
    for line in settings_lines(cfg):
        echo(line)
    if report["family"].get("single_file"):
        echo(f"  single file    {report['family']['single_file']}")
    data = report["dataset"]
    echo("dataset:")
    echo(f"  images         {data['images_used']} used of {data['images_found']} found")
    captions = data.get("captions") or {}
    for example in captions.get("examples", []):
        echo(f"  caption        {example}")
    if captions.get("cost"):
        echo(f"  variants       {captions['cost']}")
    for entry in data.get("entries") or []:
        sampling = (
            f"weight {entry['weight']:g}" if entry["weight"] is not None else f"x{entry['repeats'] or 1}"
        )
        echo(
            f"  entry          {entry['label']}: {entry['images']} image(s) {sampling} -> "
            f"{entry['samples_per_epoch']} per epoch ({entry['share']:.1%}), loss weight {entry['loss_weight']:g}"
            + (" (regularisation: x prior_loss_weight)" if entry.get("regularisation") else "")
        )
    echo(f"  captions       {', '.join(f'{k}: {v}' for k, v in data['caption_sources'].items()) or '-'}")
    by_side = data.get("buckets_by_resolution") or {}
    if len(by_side) > 1:  # several resolutions: each one's buckets
        for side, buckets in by_side.items():
            echo(f"  buckets {side:<7}{', '.join(f'{k}: {v}' for k, v in buckets.items())}")
    else:
        echo(f"  buckets        {', '.join(f'{k}: {v}' for k, v in data['buckets'].items()) or '-'}")
    mode, controls = data.get("mode") or {}, data.get("controls")
    if mode.get("note"):  # a family that takes control images: text-to-image, edit or both
        echo(f"  trains         {mode['kind']}: {mode['note']}")
    if controls:
        echo(f"  pairs          {controls['pairs']} (up to {controls['per_image']} control(s) each; "
             f"from {', '.join(controls['sources'])})")  # fmt: skip
        for line in controls.get("sizes") or []:
            echo(f"  controls       {line}")
    if data.get("masks"):
        masks = data["masks"]
        echo(f"  masks          {masks['images_with_mask']} image(s) ({masks['source']})")
    if data.get("validation"):
        val = data["validation"]
        every = f"every {val['every']} steps and " if val["every"] else ""
        echo(f"  validation     {val['held_out']} held out ({val['source']}), {every}after the last step:")
        echo(f"                 {', '.join(val['images'])}")
    sched = report["schedule"]
    echo("schedule:")
    echo(
        f"  steps          {sched['steps']} ({sched['epochs']} epochs of {sched['steps_per_epoch']} steps; "
        f"batch {sched['batch_size']} x accumulation {sched['grad_accum']})"
    )
    if sched.get("preservation"):
        echo(f"  preservation   {sched['preservation']}")
    conditioning = report.get("conditioning") or {}
    if conditioning.get("per_step"):  # train_text_encoder: no caption cache
        echo(f"  conditioning   {conditioning['note']}")
    prec = report["precision"]
    echo("precision:")
    echo(f"  device         {prec['device']} ({report['host']['name']})")
    echo(f"  base weights   {prec['base_dtype']} (requested {prec['requested']}); LoRA {prec['lora_dtype']}")
    plan = report["plan"]
    echo(f"plan (decided by {plan['decided_by']}):")
    for field in plan["fields"]:
        value = "measured at the start" if field["value"] is None else field["value"]
        echo(f"  {field['name']:<23}{value} ({field['source']})")
    mem = report["memory"]
    gb = "unknown" if mem["estimated_gb"] is None else f"~{mem['estimated_gb']} GB"
    echo(f"memory: {gb} ({mem['note']})")
    if mem.get("gpu_gb") is not None:  # jobs/card_fit.py: the plan against the GPU's memory
        verdict = {"fits": "fits", "planned": "the card's memory is the budget", "tight": "tight"}
        echo(f"GPU memory: {mem['gpu_gb']} GiB, {verdict.get(mem['gpu_fit'], mem['gpu_fit'])}")
        if mem.get("gpu_note"):
            typer.secho(f"  {mem['gpu_note']}", fg=typer.colors.YELLOW if mem["gpu_fit"] == "tight" else None)
    if mem.get("host_gb") is not None:
        free = "unknown" if mem.get("available_gb") is None else f"{mem['available_gb']} GB"
        sure = "" if mem.get("host_certain") else " (not measured on this kind of host: a guide)"
        echo(f"host RAM: ~{mem['host_gb']} GB at the peak, {free} available{sure}")
    cache = report.get("latent_cache")
    if cache:
        where = {"memory": "in RAM", "disk": "on disk", "per_step": "none: encoded every step"}[cache["mode"]]
        echo(f"latent cache: {where} (latent_cache = {cache['setting']}; {cache['ram_gb']} GB in RAM)")
        if cache["mode"] == "disk":
            echo(f"  {cache['note']}; {cache['folder']} holds {cache['disk_bytes'] / 1e9:.3f} GB")
    if mem.get("host_warning"):
        typer.secho(f"warning: {mem['host_warning']}", fg=typer.colors.YELLOW)
    if report.get("time"):
        print_time(report["time"])
    for line in warnings(report):
        typer.secho(f"warning: {line}", fg=typer.colors.YELLOW)


def settings_lines(cfg: dict[str, Any]) -> list[str]:
    """The report's first lines: the run's main settings, its data as given (data_dir, or each
    `[[datasets]]` entry's path: never "data_dir None" for a run of entries)."""
    lines = []
    for key in (
        "family",
        "base_model",
        "data_dir",
        "output_name",
        "resolution",
        "lora_rank",
        "learning_rate",
    ):
        if key == "data_dir" and cfg.get("data_dir") is None and cfg.get("datasets"):
            paths = [str(entry["path"]) for entry in cfg["datasets"]]
            lines.append(f"  {'datasets':<15}{', '.join(paths)}")
            continue
        lines.append(f"  {key:<15}{cfg.get(key)}")
    return lines


def print_time(forecast: dict[str, Any]) -> None:
    """The wall-time forecast: its total and confidence, then each phase with its basis where it
    is not the one most phases share (that one is said once, on the first line; a phase whose basis
    adds to it, as the process start's does, shows only what it adds)."""
    echo = typer.echo
    echo(f"time: ~{duration(forecast['total_s'])} ({forecast['confidence']}: {forecast['note']})")
    for phase, basis in zip(
        forecast["phases"], phase_bases(forecast["phases"], forecast["note"]), strict=True
    ):
        echo(f"  {phase['name']:<17}{duration(phase['seconds']):>9}" + (f"  ({basis})" if basis else ""))


def phase_bases(phases: list[dict[str, Any]], note: str) -> list[str]:
    """Each phase's basis as the report prints it: "" for the basis most phases share where the
    forecast's note (the first line) says it (and for every phase when all but "other" share one),
    the added part where a phase's basis extends it ("the shared basis (more)" -> "more"), else the
    phase's own."""
    counts = Counter(p["basis"] for p in phases if p["name"] != "other")
    if len(counts) <= 1:
        return ["" for _ in phases]
    common, shared_by = counts.most_common(1)[0]
    if shared_by < 2 or common not in note:  # none shared, or the first line does not say it
        return [p["basis"] for p in phases]
    out = []
    for phase in phases:
        basis = phase["basis"]
        if basis == common:
            out.append("")
        elif basis.startswith(common) and basis[len(common) :].strip():
            out.append(_added(basis[len(common) :]))
        else:
            out.append(basis)
    return out


def _added(tail: str) -> str:
    """What a phase's basis adds to the shared one, as its own words: " (more)" -> "more" (its
    outer parentheses alone, where they enclose all of it), "; runs of lora, not this run's lokr
    (factor -1)" -> "runs of lora, not this run's lokr (factor -1)" (the parenthesis that
    closes a word of it kept)."""
    text = tail.strip().removeprefix(";").strip()
    if text.startswith("(") and text.endswith(")") and _closes_at_end(text):
        text = text[1:-1]
    return text


def _closes_at_end(text: str) -> bool:
    """Whether the "(" that opens `text` is closed by its last character (not earlier)."""
    depth = 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            return i == len(text) - 1
    return False


def duration(seconds: float) -> str:
    """'42.0 s', '3 min 05 s' or '2 h 07 min'."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


def warnings(report: dict[str, Any]) -> list[str]:
    """What a user should know before the run: dropped files, images without a caption file,
    captions the text encoder cuts, the base model flavour's notes, the preflight's notes (checks
    left to the run's start, an init_lora DoRA read by a guessed dora_scale rule)."""
    data = report["dataset"]
    out = [f"{d['file']} is not used: {d['reason']}" for d in data["dropped"]]
    if data["missing_captions"]:
        shown = ", ".join(data["missing_captions"][:5])
        more = len(data["missing_captions"]) - 5
        out.append(
            f"{len(data['missing_captions'])} image(s) have no caption, or an empty one ({shown}"
            + (f", and {more} more" if more > 0 else "")
            + "): they train on the trigger word or default caption"
        )
    tokens = data.get("caption_tokens") or {}
    if tokens.get("cut"):  # captions the text encoder cuts (jobs/caption_tokens.py)
        shown = ", ".join(f"{c['file']} ({c['tokens']})" for c in tokens["cut"][:5])
        more = len(tokens["cut"]) - 5
        out.append(f"{tokens['note']}: {shown}" + (f", and {more} more" if more > 0 else ""))
    out += data.get("warnings") or []  # e.g. upscaled images, images without a mask
    out += report["family"]["notes"]
    out += report.get("notes") or []
    return out
