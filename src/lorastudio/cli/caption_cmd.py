"""`lorastudio datasets caption NAME --model ID`: caption a dataset's images with a VLM, here.

Runs in this process (the model on the GPU when there is one, `--device cpu` otherwise) while
sharing the studio home with other CLI commands: refused (exit 1) while a server owns the home
(caption through it then: the UI or POST /api/datasets/NAME/caption, which respects the GPU
arbiter). The dataset is claimed for writing (jobs/dataset_claims.py): refused (exit 3, naming
the holder) while a CLI `train` reads it or another `datasets caption` writes it, and those are
refused while this runs. The job is recorded in the studio home like a server's
(jobs/caption_records.py), so the web UI lists it; a kill reads "interrupted" there.
"""

from __future__ import annotations

from typing import Any

import typer

EXIT_BUSY = 3  # the dataset is read by a run or captioned by another process: nothing written


def register(datasets_app: typer.Typer) -> None:
    datasets_app.command("caption")(caption_cmd)


def caption_cmd(
    name: str = typer.Argument(
        ..., help="dataset name under the studio's datasets folder (one that starts with '-' goes after '--')"
    ),
    model: str = typer.Option(
        ..., "--model", help="captioning VLM: catalogue id (`models list`), hub id or model folder"
    ),
    revision: str | None = typer.Option(None, "--revision", help="hub revision (branch, tag, commit)"),
    prompt: str | None = typer.Option(None, "--prompt", help="what to ask (default: a one-sentence caption)"),
    prefix: str | None = typer.Option(
        None, "--prefix", help="put first in every new caption (a trigger word)"
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="caption every image, not only uncaptioned ones"
    ),
    max_tokens: int = typer.Option(60, "--max-tokens", min=1, help="new tokens per caption"),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda"),
) -> None:
    """Caption the images of dataset NAME that have no caption (all with --overwrite) with a
    vision-language model (Qwen2.5-VL, Qwen2-VL, Florence-2), greedy: the same model gives the
    same captions. Prints a line per image and a summary; exits 1 when an image failed."""
    from huggingface_hub.utils import disable_progress_bars
    from pydantic import ValidationError

    disable_progress_bars()  # quiet_libraries' hub part (below), before resolve_captioner's fetches
    from lorastudio.captioning.options import CaptionOptions, check_prompt
    from lorastudio.captioning.run import caption_dataset
    from lorastudio.captioning.source import resolve_captioner
    from lorastudio.cli.config_file import localize_path
    from lorastudio.data import resolve_dataset_dir, safe_component
    from lorastudio.errors import ConfigError, DatasetBusy, FieldProblem, HomeInUse
    from lorastudio.jobs.dataset_claims import WRITE, DatasetClaim
    from lorastudio.jobs.homelock import HomeLock
    from lorastudio.settings import get_settings

    # a model folder given relative to where the command runs ("./vlm", "out/vlm": what `lorastudio
    # tiny vlm PATH` wrote), as every CLI path is; a bare name stays a models/ name, owner/name a hub id
    model = localize_path(model, may_be_hub_id=True)
    try:
        options = CaptionOptions(
            model=model, revision=revision, prompt=prompt, prefix=prefix, overwrite=overwrite,
            max_tokens=max_tokens, device=device,
        )  # fmt: skip
    except ValidationError as err:
        problems = [FieldProblem(".".join(map(str, e["loc"])), e["msg"]) for e in err.errors()]
        raise ConfigError(problems) from None
    settings = get_settings().ensure_dirs()
    folder = resolve_dataset_dir(
        safe_component(name, field="NAME"), settings.datasets_dir, allow_outside_root=False
    )
    source = resolve_captioner(settings, options.model, options.revision)
    check_prompt(source.kind, options)
    try:
        lock = HomeLock.for_cli_run(
            settings.home, through=f"caption through it (web UI or POST /api/datasets/{name}/caption"
        )
    except HomeInUse as err:
        typer.echo(f"dataset {name} not captioned: {err}", err=True)
        raise typer.Exit(1) from None
    token = settings.hf_token.get_secret_value() if settings.hf_token else None
    with lock:
        try:
            claim = DatasetClaim.take(
                settings.home, settings.datasets_dir, [folder], WRITE, f"`lorastudio datasets caption {name}`"
            )
        except DatasetBusy as err:
            typer.echo(f"dataset {name} not captioned: {err}", err=True)
            raise typer.Exit(EXIT_BUSY) from None
        with claim:
            # diffusers and transformers (~3 CPU s of imports) only for a caption that runs: every
            # refusal above (an option, the home, the dataset's claim) answers without them
            from lorastudio.cli.run_display import quiet_libraries

            quiet_libraries()
            record = _Record(settings.home, name, folder, options)
            try:
                summary = caption_dataset(
                    folder,
                    source,
                    options,
                    record.event,
                    token=token,
                    max_image_pixels=settings.max_image_pixels,
                )
            except KeyboardInterrupt:
                record.end("cancelled", reason="stopped with Ctrl-C")
                raise
            except Exception as err:  # a model failure: recorded as the job's end, then raised on
                record.end("failed", error=str(err) or type(err).__name__)
                raise
            record.end("completed")
    raise typer.Exit(1 if summary.failures else 0)


class _Record:
    """This CLI job's record in the studio home (jobs/caption_records.py: a server lists it, and
    it reads "interrupted" when this process is killed before its end): the events fold into a
    CaptionJob, each printed (`_print_event`)."""

    def __init__(self, home: Any, name: str, folder: Any, options: Any):
        import uuid

        from lorastudio.jobs.caption_job import CaptionJob
        from lorastudio.jobs.caption_records import CaptionRecorder, prune

        device = "cuda" if options.device == "cuda" else "cpu"  # "auto": the worker's plan says which
        self.job = CaptionJob(uuid.uuid4().hex[:12], name, folder, options, device)
        self.recorder = CaptionRecorder(home, "cli")
        self.recorder.write(self.job.snapshot(), force=True)
        prune(home)

    def event(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "caption_started" and event.get("device") in ("cpu", "cuda"):
            self.job.device = event["device"]
        self.job.apply(event)
        snapshot = self.job.snapshot()
        self.recorder.write(snapshot, force=kind == "caption_started")
        _print_event(event, snapshot["eta_s"])

    def end(self, status: str, error: str | None = None, reason: str | None = None) -> None:
        from lorastudio.jobs.caption_job import now_iso

        self.job.status, self.job.error, self.job.finished_at = status, error, now_iso()
        self.job.cancel_reason = reason
        self.recorder.write(self.job.snapshot(), force=True)


def _print_event(event: dict[str, Any], eta_s: float | None = None) -> None:
    """One event as one line per fact: a file name or reason holding a line break (a name may)
    is escaped visibly (`shown`), so no name can start a line that reads as another image's; the
    captions are one line already (captioning/targets.clean_caption). An image's line ends with
    the time left (`eta_s`, the job's estimate) when there is one."""
    from lorastudio.cli.safe_output import shown

    left = f"  (~{_duration(eta_s)} left)" if eta_s is not None else ""

    kind = event["type"]
    if kind == "caption_started":
        device = f" on {event['device']}" if "device" in event else ""
        typer.echo(f"captioning {event['total']} image(s){device}; {event['skipped']} already captioned")
        if kept := event.get("kohya_kept"):
            names = ", ".join(shown(n) for n in kept[:5]) + (" ..." if len(kept) > 5 else "")
            typer.echo(
                f"  {event.get('kohya_count', len(kept))} of them are captioned only by a kohya .caption file "
                f"({names}), which a run of this dataset "
                "does not read: kept; rename each to <name>.txt, or caption them with --overwrite"
            )
    elif kind == "caption_progress":
        cut = "  (cut at --max-tokens)" if event.get("cut") else ""
        typer.echo(
            f"[{event['index']}/{event['total']}] {shown(event['file'])}: {shown(event['caption'])}{cut}{left}"
        )
    elif kind == "caption_kept":
        where = f"[{event['index']}/{event['total']}] " if "index" in event else ""
        typer.echo(f"{where}{shown(event['file'])}: {event['reason']}{left}")
    elif kind == "caption_failed":
        typer.echo(
            f"[{event['index']}/{event['total']}] {shown(event['file'])}: FAILED: {shown(event['reason'])}{left}"
        )
    elif kind == "caption_summary":
        typer.echo(
            f"done: {event['captioned']} captioned, {event['skipped']} skipped, {event['failed']} failed"
        )
        for failure in event["failures"]:
            typer.echo(f"  failed {shown(failure['file'])}: {shown(failure['reason'])}")
        if event["failed"] > len(event["failures"]):
            typer.echo(f"  and {event['failed'] - len(event['failures'])} more (listed above)")
        if event.get("cut"):
            typer.echo(
                f"  {event['cut']} caption(s) stopped at --max-tokens, not at the model's end (likely "
                "mid-sentence; written as made): raise --max-tokens and caption them again"
            )


def _duration(seconds: float) -> str:
    """A time left in a line: "45 s", "12 min", "2 h 05 min"."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"
