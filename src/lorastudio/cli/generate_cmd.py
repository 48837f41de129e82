"""`lorastudio generate --base B --lora PATH[:SCALE] ... --prompt P --out FILE`: one image from
a base model with zero or more LoRAs.

Runs in this process with the server's generation engine (lorastudio.generate); the revision
and each LoRA's header are checked first (lora/header.py): a bad file is a one-line error. A PNG
carries its settings in its text chunks as a gallery image does (prompt, seed, every setting as
JSON under "lorastudio", its LoRAs by file and scale)."""

from __future__ import annotations

from pathlib import Path

import typer

from lorastudio.cli.generate_checks import read_controls, request_problems
from lorastudio.cli.lora_args import parse_lora_arg, resolve_lora_arg
from lorastudio.cli.termination import refusal_status
from lorastudio.cli.user_path_args import user_path
from lorastudio.errors import (
    ConfigError,
    FieldProblem,
    LorastudioError,
    ModelSourceError,
    NotFound,
    UnknownFamily,
    writing,
)
from lorastudio.staged_files import IMAGE_PARTIAL, remove_killed_staging, staging_path
from lorastudio.user_paths import is_file, publish_file

IMAGE_SUFFIXES = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".webp": "WEBP"}


def register(app: typer.Typer) -> None:
    app.command("generate")(generate_cmd)


def generate_cmd(
    base: str = typer.Option(
        ...,
        "--base",
        help="base model: hub id, pipeline folder, a folder name under models/, or a single-file "
        "checkpoint (.safetensors; see --base-config)",
    ),
    prompt: str = typer.Option(..., "--prompt", help="text prompt"),
    out: Path = typer.Option(
        ...,
        "--out",
        callback=user_path,
        help="image file to write (.png, .jpg or .webp; a .png records the settings)",
    ),
    lora: list[str] = typer.Option(  # noqa: B006 (typer needs a list default)
        [],
        "--lora",
        help="LoRA file or a run's name (outputs/NAME/NAME.safetensors), optionally with a scale: "
        "PATH[:SCALE] or NAME[:SCALE], SCALE -4 to 4 (default 1.0; the API's range) (repeatable)",
    ),
    family: str | None = typer.Option(
        None, "--family", help="model family (default: from the folder, or the hub cache's copy of a hub id)"
    ),
    seed: int = typer.Option(0, "--seed", help="noise seed, 0-4294967295 (the same seed, the same image)"),
    steps: int | None = typer.Option(
        None, "--steps", help="inference steps, 1-200 (default: the family's; the API's budget)"
    ),
    width: int | None = typer.Option(
        None, "--width", help="image width in pixels (default: the family's training resolution)"
    ),
    height: int | None = typer.Option(
        None, "--height", help="image height in pixels (default: the family's training resolution)"
    ),
    guidance: float | None = typer.Option(
        None,
        "--guidance",
        help="guidance scale 0-100, where the family's pipeline takes one (default: the family's)",
    ),
    negative: str | None = typer.Option(
        None, "--negative", help="negative prompt (families whose pipeline takes one: `lorastudio families`)"
    ),
    max_sequence_length: int | None = typer.Option(
        None,
        "--max-sequence-length",
        help="text tokens the prompt is read to, for the families whose settings list max_sequence_length "
        "(`lorastudio families`; refused for sdxl and qwen-image-edit); a run's previews: the run's "
        "max_sequence_length; default: the pipeline's 512",
    ),
    revision: str | None = typer.Option(None, "--revision", help="hub revision"),
    base_config: str | None = typer.Option(
        None,
        "--base-config",
        help="a single-file --base (.safetensors): pipeline folder or hub id of its configs "
        "(default: the original model's hub id)",
    ),
    v_prediction: bool | None = typer.Option(
        None,
        "--v-prediction/--epsilon",
        help="SDXL single file: the prediction type (default: as the file says)",
    ),
    device: str | None = typer.Option(
        None, "--device", help="cpu, cuda or cuda:N (default: CUDA if available)"
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="replace --out if it exists"),
    control: list[Path] = typer.Option(  # noqa: B006 (typer needs a list default)
        [],
        "--control",
        callback=user_path,
        help="reference image of an edit family, e.g. flux-kontext (repeatable)",
    ),
    control_resolution: str | None = typer.Option(
        None,
        "--control-resolution",
        help="with --control: size and encode each reference as a run of this control_resolution trains it "
        "(pipeline, target or a side N; a run's previews: the run's); default: fitted to the output size",
    ),
) -> None:
    """Generate one image, optionally with LoRAs applied at the given scales."""

    try:
        _generate(  # a SIGTERM mid-write removes the staging file (cli/termination.py)
            base, prompt, out, lora, family, seed, steps, width, height, guidance, revision, device,
            overwrite, control, base_config, v_prediction, negative, max_sequence_length,
            _control_rule(control_resolution),
        )  # fmt: skip
    except LorastudioError as err:  # README's statuses: 1 for a write that failed, 2 for a refusal
        typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(refusal_status(err)) from None


def _generate(
    base: str,
    prompt: str,
    out: Path,
    lora_args: list[str],
    family: str | None,
    seed: int,
    steps: int | None,
    width: int | None,
    height: int | None,
    guidance: float | None,
    revision: str | None,
    device: str | None,
    overwrite: bool,
    control: list[Path] | None = None,
    base_config: str | None = None,
    v_prediction: bool | None = None,
    negative: str | None = None,
    max_sequence_length: int | None = None,
    control_resolution: str | int | None = None,
) -> None:

    from lorastudio import families
    from lorastudio.basemodels import resolve_base
    from lorastudio.basemodels.hubcache import cached_snapshot, is_hub_id
    from lorastudio.basemodels.resolve import family_free_problem
    from lorastudio.basemodels.single_file import base_updates, read_file_facts
    from lorastudio.cli.config_file import localize_path
    from lorastudio.cli.run_display import quiet_libraries
    from lorastudio.config import local_revision_problem, revision_problem
    from lorastudio.generate import apply_loras, detect_family, generate_image, load_pipeline
    from lorastudio.generation_rules import (
        LORA_SCALE_LIMIT,
        control_resolution_problems,
        guidance_problems,
        prompt_problems,
        seed_problems,
        text_tokens_problems,
        unused_guidance_problems,
    )
    from lorastudio.hub_token import hold_studio_hub_token
    from lorastudio.jobs.generation_worker import png_text
    from lorastudio.lora.file_digest import changed_problem, lora_digest
    from lorastudio.lora.header import check_lora_file
    from lorastudio.settings import get_settings
    from lorastudio.training.precision import pick_device
    from lorastudio.user_paths import output_file_problem

    problems = seed_problems(seed, "--") + guidance_problems(guidance, "--")  # generation_rules, as the API's
    fmt = IMAGE_SUFFIXES.get(out.suffix.lower())
    if why := output_file_problem(out, tuple(IMAGE_SUFFIXES), overwrite, "--overwrite"):
        problems.append(FieldProblem("--out", why))
    try:  # with the other problems, as `train --check` names it (train_check.device_problems)
        pick_device(device, "--device")
    except ConfigError as err:
        problems += err.problems
    settings = get_settings()
    hold_studio_hub_token()  # LORASTUDIO_HF_TOKEN for the pipeline's hub calls (hub_token.py)
    typed = {"base_model": base, "base_config": base_config}  # the PNG records them as typed (below)
    base = localize_path(base, may_be_hub_id=True)
    base_config = localize_path(base_config, may_be_hub_id=True) if base_config else None
    family = family or detect_family(base) or detect_family(str(settings.models_dir / base))
    as_file = next((p for p in (Path(base), settings.models_dir / base) if is_file(p)), None)
    if family is None and as_file is not None:  # a single-file checkpoint says its family
        try:
            family = read_file_facts(as_file).family
        except (ModelSourceError, NotFound) as err:
            problems.append(FieldProblem("--base", str(err)))
    source = None
    found = None
    bad_revision = revision_problem(revision) if revision is not None else None
    # a revision with a local folder or file: the one rule (config_fields_source)
    bad_revision = bad_revision or local_revision_problem(base, revision, base_config, field="--base")
    if bad_revision:  # checked before the revision can name a path in the hub cache
        problems.append(FieldProblem("--revision", bad_revision))
    if family is None and not bad_revision and is_hub_id(base):  # one in the hub cache says it too
        snapshot = cached_snapshot(base, revision)
        family = detect_family(str(snapshot)) if snapshot is not None else None
    if family is None:  # what is wrong with the base whatever its family, else ask for the family
        why = family_free_problem(base, settings)
        problems.append(
            FieldProblem("--base", why)
            if why
            else FieldProblem("--family", f"cannot tell the family of {base!r}; pass --family")
        )
    elif (
        not bad_revision
    ):  # the same check as a training run's base_model: folder, name under models/, hub id
        try:
            found = resolve_base(base, families.get(family).spec.name, settings, revision, base_config)
            source = found.source
            problems += [
                FieldProblem(f"--{p.field.replace('_', '-')}", p.message)
                for p in base_updates(
                    found.source, found.folder, found.file, found.config, base_config, v_prediction, revision
                )[1]
            ]
        except (UnknownFamily, ModelSourceError) as err:
            problems.append(
                FieldProblem("--family" if isinstance(err, UnknownFamily) else "--base", str(err))
            )
        except ConfigError as err:  # a revision with a folder under models/ (resolve_base)
            problems += [FieldProblem(f"--{p.field.replace('_', '-')}", p.message) for p in err.problems]
    loras = []
    typed_loras = []  # each LoRA as typed (a run's name, ~/...), for the PNG
    for path, scale in (parse_lora_arg(v, outputs=settings.outputs_dir) for v in lora_args):
        if abs(scale) > LORA_SCALE_LIMIT:  # the API's range (LoraRef.scale)
            problems.append(
                FieldProblem(
                    "--lora",
                    f"{path}:{scale:g}: a scale must be between {-LORA_SCALE_LIMIT:g} and {LORA_SCALE_LIMIT:g}",
                )
            )
            continue
        typed_path = str(path)
        try:
            path = resolve_lora_arg(path, settings.outputs_dir)
        except NotFound as err:
            problems.append(FieldProblem("--lora", str(err)))
            continue
        loras.append((path, scale))
        typed_loras.append(typed_path)
        if family is not None:  # the header (size-capped) checked before any tensor is loaded
            try:
                check_lora_file(path, family)
            except (ModelSourceError, NotFound) as err:
                problems.append(FieldProblem("--lora", str(err)))
    references = read_controls(control or [], problems)
    if family is not None and family in families.names():  # what the API checks, before any load
        problems += request_problems(family, found, len(control or []), width, height, steps)
    if negative and family is not None and family in families.names():
        from lorastudio.jobs.generation_inputs import negative_prompt_refusal

        if not families.get(family).spec.negative_prompt:  # refused before the pipeline loads
            problems.append(FieldProblem("--negative", negative_prompt_refusal(families.get(family).spec)))
    if family is not None and family in families.names():  # a scale its pipeline would not apply
        problems += unused_guidance_problems(guidance, negative, family, "--")
    problems += prompt_problems({"--prompt": prompt, "--negative": negative})  # the API's rule
    if family is not None and family in families.names():  # the API's rule, before the pipeline loads
        problems += [
            FieldProblem("--max-sequence-length", p.message)
            for p in text_tokens_problems(max_sequence_length, family)
        ]
        problems += [
            FieldProblem("--control-resolution", p.message)
            for p in control_resolution_problems(control_resolution, family, len(control or []))
        ]
    if problems or source is None or family is None:
        raise ConfigError(problems)
    spec = families.get(family).spec
    default_side = spec.generation_side  # what POST /api/generate and the web take too
    digests = [lora_digest(p) for p, _ in loras]  # what the PNG records; the files applied must stay these
    dev = pick_device(device, "--device")
    quiet_libraries()
    pipe = load_pipeline(
        source,
        spec.name,
        revision=revision,
        device=dev,
        base_config=found.config if found is not None else None,
        v_prediction=v_prediction,
    )
    apply_loras(pipe, loras)
    changed = [
        FieldProblem("--lora", why)
        for (p, _), d in zip(loras, digests, strict=True)
        if (why := changed_problem(p, d))
    ]
    if changed:  # replaced while the pipeline loaded them: the image would not be of the files recorded
        raise ConfigError(changed)
    from lorastudio.jobs.generation_base import base_identity

    identity = base_identity(found, spec.denoiser, revision) if found is not None else None  # loaded: here
    image = generate_image(
        pipe,
        spec.name,
        prompt=prompt,
        seed=seed,
        steps=steps,
        width=default_side if width is None else width,
        height=default_side if height is None else height,
        guidance=guidance,
        negative_prompt=negative,
        max_sequence_length=max_sequence_length,
        controls=references,
        control_resolution=control_resolution,
    )
    remove_killed_staging(out.parent, IMAGE_PARTIAL)  # what killed `generate --out` left there
    staging = staging_path(out, IMAGE_PARTIAL)  # `.<name>.<pid>-<hex>.partial`: this command's
    # what the user typed, not where it resolved to: the PNG is shared, and `--lora my-run` or
    # `--base ~/models/x` named no folder of theirs (RELIABILITY 781); sent again from the same
    # folder they are the same files, which each LoRA's sha256 and the base identity vouch for
    recorded = {
        "prompt": prompt, "seed": seed, "family": spec.name, "base_model": typed["base_model"],
        **({"base_config": typed["base_config"]} if base_config else {}),
        **({"revision": revision} if revision is not None else {}),
        **({"v_prediction": v_prediction} if v_prediction is not None else {}),
        **({"base_identity": identity} if identity is not None else {}),
        "steps": steps, "guidance": guidance,
        **({"negative_prompt": negative} if negative else {}),
        **({"max_sequence_length": max_sequence_length} if max_sequence_length is not None else {}),
        **({"control_resolution": control_resolution} if control_resolution is not None else {}),
        "loras": [
            {"file": t, "scale": s, "sha256": d} for t, (_, s), d in zip(typed_loras, loras, digests, strict=True)
        ],
        "controls": [str(p) for p in control or []],
        "width": image.width, "height": image.height,
    }  # fmt: skip
    try:
        # a PNG carries its settings as a gallery image does (jobs.generation_worker.png_text)
        with writing(f"the image {out.name} could not be written", out):
            image.save(staging, format=fmt, **({"pnginfo": png_text(recorded)} if fmt == "PNG" else {}))
        if why := publish_file(staging, out, overwrite, "--overwrite"):
            raise ConfigError([FieldProblem("--out", why)])
    finally:
        staging.unlink(missing_ok=True)
    typer.echo(f"wrote {out} ({image.width}x{image.height}, seed {seed}, {len(loras)} LoRA(s))")


def _control_rule(value: str | None) -> str | int | None:
    """--control-resolution as the rule it names: "pipeline", "target", or a side (ASCII digits,
    lorastudio.digits) as an int; anything else as given (control_resolution_problems names it:
    "²" and 5,000 digits raised from int(), RELIABILITY 2103)."""
    from lorastudio.digits import whole_number

    if value is None:
        return None
    side = whole_number(value.strip())
    return value if side is None else side
