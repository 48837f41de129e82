"""A run's dataset entries (config_datasets): resolve each folder, expand kohya folders, scan
every entry, and join them into one DatasetScan whose items know their entry (no torch, no HTTP).

The joined scan: items of entry 0, then entry 1, ... (each entry's sorted by file name, with
`ImageItem.entry` set); `dropped` names each file with its entry's label when there are several;
`entries` holds the resolved MixEntry of each (images and fingerprint filled); the fingerprint is
the single entry's own (so a run of one plain folder keeps the fingerprint it always had), else a
sha256 over every entry's fingerprint and sampling settings, in order. Problems of every entry are
reported at once, each prefixed with its entry.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from lorastudio.config_datasets import config_entries, effective_trigger, resolution_list
from lorastudio.data.decode_progress import DecodeProgress
from lorastudio.data.decode_slots import DEFAULT_DECODE_PIXELS
from lorastudio.data.items import DatasetScan, ImageItem
from lorastudio.data.mix import EpochMix, MixEntry, is_plain
from lorastudio.data.paths import resolve_dataset_dir
from lorastudio.data.resolutions import at_resolution
from lorastudio.data.sampler import BucketBatchSampler
from lorastudio.data.scan import scan_dataset
from lorastudio.errors import ConfigError, DatasetError, FieldProblem, PathOutsideRoot

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig


class EntryScanError(DatasetError):
    """The problems of a several-entry scan (scan_entries), each also kept with the index of its
    entry (`by_entry`: (index in the scanned entries, problem)), so that a caller whose entries
    are the config's own (no kohya_folders) can name `datasets.N.path` (RELIABILITY 1736)."""

    def __init__(
        self, message: str, by_entry: list[tuple[int, str]], config_of: dict[int, int] | None = None
    ):
        super().__init__(message, [p for _, p in by_entry])
        self.by_entry = list(dict.fromkeys(by_entry))
        self.config_of = dict(config_of or {})  # scanned entry -> its `[[datasets]]` entry

    def field_of(self, index: int) -> str:
        """The setting scanned entry `index`'s problems are named under: `datasets.N.path` of the
        config entry it comes from (a kohya sub-folder: its parent's; RELIABILITY 1774), else
        `datasets`."""
        config = self.config_of.get(index)
        return "datasets" if config is None else f"datasets.{config}.path"


def entry_field(cfg: TrainConfig, index: int) -> str:
    """The setting that names entry `index`'s folder: data_dir, or datasets.N.path."""
    return "data_dir" if cfg.datasets is None else f"datasets.{index}.path"


def resolve_entries(
    cfg: TrainConfig, datasets_root: Path, *, allow_outside_root: bool, check_links: bool = False
) -> list[MixEntry]:
    """The run's entries with their folders resolved (data.paths.resolve_dataset_dir) and the
    run's caption options / resolution filled where an entry leaves them unset (a regularisation
    entry: never the run's trigger word, and its loss_weight times cfg.prior_loss_weight); with
    cfg.kohya_folders, each folder's kohya sub-folders instead (data.kohya.kohya_entries).
    `cfg` must be resolved (its resolution set). `check_links`: refuse a folder that now leads
    through a link (safe_open.check_not_relinked, for the worker).

    Raises: for data_dir, what resolving it raises (ConfigError, PathOutsideRoot, DatasetError);
    for datasets, one ConfigError naming every bad entry (datasets.N.path), an entry whose
    folder (resolved: another spelling, a link) an earlier entry names included."""
    from lorastudio.data.kohya import kohya_entries
    from lorastudio.data.safe_open import check_not_relinked

    given = config_entries(cfg)
    out: list[MixEntry] = []
    errors: list[tuple[int, Exception]] = []
    seen: dict[Path, int] = {}
    for i, entry in enumerate(given):
        try:
            root = resolve_dataset_dir(
                entry.path,
                datasets_root,
                allow_outside_root,
                field="path" if cfg.datasets is not None else "data_dir",
            )
            if check_links:
                check_not_relinked(entry.path, root, datasets_root)
            if root in seen:  # the same images twice: repeats / weight say that, two settings would clash
                raise ConfigError(
                    [FieldProblem(entry_field(cfg, i), f"the same folder as datasets.{seen[root]} ({root}): one "
                                  "entry per folder (give it repeats or a weight)")]
                )  # fmt: skip
            seen[root] = i
            mixed = MixEntry(
                label=entry.path,
                root=root,
                repeats=entry.repeats,
                weight=entry.weight,
                loss_weight=entry.loss_weight * (cfg.prior_loss_weight if entry.regularisation else 1.0),
                caption_dropout=_pick(entry.caption_dropout, cfg.caption_dropout),
                trigger_word=effective_trigger(
                    entry.trigger_word
                    if entry.regularisation
                    else _pick(entry.trigger_word, cfg.trigger_word)
                ),  # type: ignore[arg-type]
                default_caption=_pick(entry.default_caption, cfg.default_caption),
                resolutions=tuple(resolution_list(_pick(entry.resolution, cfg.resolution))),  # type: ignore[arg-type]
                shuffle_tags=bool(_pick(entry.shuffle_tags, cfg.shuffle_tags)),
                keep_tokens=int(_pick(entry.keep_tokens, cfg.keep_tokens)),  # type: ignore[call-overload]
                tag_dropout=float(_pick(entry.tag_dropout, cfg.tag_dropout)),  # type: ignore[arg-type]
                regularisation=entry.regularisation,
                prior_prediction=entry.prior_prediction,
                config_index=i if cfg.datasets is not None else None,
            )
            out += kohya_entries(mixed) if cfg.kohya_folders else [mixed]
        except (ConfigError, PathOutsideRoot, DatasetError) as err:
            errors.append((i, err))
    errors += [(i, ConfigError([FieldProblem(entry_field(cfg, i), why)])) for i, why in _inner_folders(seen)]
    if errors and cfg.datasets is None:
        raise errors[0][1]  # data_dir: its own error, as before entries
    if errors:
        raise ConfigError([p for i, err in errors for p in _problems(entry_field(cfg, i), err)])
    return out


def _inner_folders(seen: dict[Path, int]) -> list[tuple[int, str]]:
    """(entry index, why) for each entry whose folder (resolved: `seen` maps each to its entry)
    is the masks/ or a control folder (control/, control_2/ ...) of another entry's folder: its
    files are that entry's loss masks or control images, and as an entry of their own they would
    train as subject images (captioned by the trigger word; RELIABILITY 1730)."""
    from lorastudio.data.masks import MASKS_DIR
    from lorastudio.data.pairs import CONTROL_FOLDER

    out = []
    for root, i in seen.items():
        outer = seen.get(root.parent)
        if outer is None or not (root.name == MASKS_DIR or CONTROL_FOLDER.match(root.name)):
            continue
        what = "loss masks" if root.name == MASKS_DIR else "control images"
        out.append(
            (i, f"{root} is the {root.name}/ folder of datasets.{outer} ({root.parent}): its images are "
                f"that entry's {what}, and as an entry of their own they would train as images to learn; "
                "leave it out (or copy the images to a folder of their own if they are meant to train)")
        )  # fmt: skip
    return sorted(out)


def resolved_folders(cfg: TrainConfig, datasets_root: Path, allow_outside_root: bool) -> list[Path]:
    """The configured folders (data_dir, or each entry's path; kohya parents as given), resolved
    like resolve_entries does. Raises what resolve_dataset_dir raises."""
    return [
        resolve_dataset_dir(e.path, datasets_root, allow_outside_root=allow_outside_root)
        for e in config_entries(cfg)
    ]


def _pick(own: object, run: object) -> object:
    return run if own is None else own


def _problems(field: str, err: Exception) -> list[FieldProblem]:
    if isinstance(err, ConfigError):
        return [FieldProblem(field, p.message) for p in err.problems]
    if isinstance(err, DatasetError) and err.problems:
        return [FieldProblem(field, p) for p in err.problems]
    return [FieldProblem(field, str(err))]


def scan_entries(
    entries: Sequence[MixEntry],
    *,
    multiple: int,
    aspect_buckets: bool = True,
    no_upscale: bool = False,
    max_pixels: int = 64_000_000,
    decode_pixels: int = DEFAULT_DECODE_PIXELS,
    control_dirs: Sequence[Path] = (),
    control_images: tuple[int, int] = (0, 0),
    family: str = "this family",
    prepare: Callable[[DatasetScan], DatasetScan] | None = None,
    decoded_dir: Path | None = None,
    decode_budget_s: float | None = None,
    progress: DecodeProgress | None = None,
    keep_markup: bool = False,
    controls_then: Mapping[Path, Path] | None = None,
) -> DatasetScan:
    """Scan every entry (data.scan.scan_dataset with the entry's resolution and captions) and
    join them (see the module docstring); `prepare` is applied to each entry's own scan before
    the join (e.g. data.masks.attach_masks: each folder's masks/); `decoded_dir` and
    `decode_budget_s` are scan_dataset's (each folder's full decodes), `progress` too (the
    run's count of them across every entry, and its stop check), `keep_markup` too (a resume's
    scan keeps captions with another trainer's markup), `controls_then` too (the fingerprint
    rule-1 checkpoint's resume compares: data.scan.dataset_fingerprint). Raises DatasetError listing
    every entry's problems (one entry: scan_dataset's own error), and what `prepare` raises."""
    many = len(entries) > 1
    scans: list[DatasetScan] = []
    problems: list[tuple[int, str]] = []
    for index, entry in enumerate(entries):
        try:
            scans.append(
                scan_dataset(
                    entry.root,
                    resolution=entry.resolutions[0] if entry.resolutions else 0,
                    multiple=multiple,
                    aspect_buckets=aspect_buckets,
                    no_upscale=no_upscale,
                    trigger_word=entry.trigger_word,
                    default_caption=entry.default_caption,
                    max_pixels=max_pixels,
                    control_dirs=control_dirs,
                    control_images=control_images,
                    family=family,
                    decode_pixels=decode_pixels,
                    decoded_dir=decoded_dir,
                    decode_budget_s=decode_budget_s,
                    progress=progress,
                    kohya=entry.kohya,
                    keep_markup=keep_markup,
                    controls_then=controls_then,
                )
            )
            if prepare is not None:
                scans[-1] = prepare(scans[-1])
        except DatasetError as err:
            if not many:
                raise  # one folder: its own error, as scan_dataset words it
            named = err.problems or [str(err)]  # each names its entry (a folder's own already does)
            problems += [
                (index, p if p.startswith(str(entry.root)) else f"{entry.label}: {p}") for p in named
            ]
    if problems:
        config_of = {i: e.config_index for i, e in enumerate(entries) if e.config_index is not None}
        raise EntryScanError(f"{len(problems)} dataset problem(s)", problems, config_of)
    filled = tuple(
        replace(e, images=len(s.items), fingerprint=s.fingerprint)
        for e, s in zip(entries, scans, strict=True)
    )
    items: list[ImageItem] = []
    dropped: list[tuple[str, str]] = []
    for index, (entry, scan) in enumerate(zip(filled, scans, strict=True)):
        first = [replace(it, entry=index, resolution=entry.resolutions[0]) for it in scan.items]
        items += first
        for side in entry.resolutions[1:]:  # each image again at each other resolution
            items += at_resolution(
                first, side, multiple, aspect_buckets=aspect_buckets, no_upscale=no_upscale
            )
        dropped += [
            (f"{entry.label}/{name}" if many else name, _inner_entry(entry.root / name, filled) or why)
            for name, why in scan.dropped
        ]
    return DatasetScan(
        root=scans[0].root,
        items=items,
        dropped=dropped,
        fingerprint=mix_fingerprint(filled),
        control_sources=tuple(dict.fromkeys(s for scan in scans for s in scan.control_sources)),
        control_dirs=tuple(control_dirs),
        entries=filled,
    )


def _inner_entry(path: Path, entries: Sequence[MixEntry]) -> str | None:
    """The dropped reason of an entry's sub-folder `path` that is an entry of the run itself (its
    images do train), None for any other file."""
    inner = next((e for e in entries if e.root == path), None)
    return None if inner is None else f"sub-folder: trained as an entry of its own ({inner.label})"


def mix_fingerprint(entries: Sequence[MixEntry]) -> str:
    """The fingerprint of the run's data: the single plain entry's own, else a sha256 over each
    entry's fingerprint and settings, in order."""
    if len(entries) == 1 and is_plain(entries) and entries[0].loss_weight == 1.0:
        return entries[0].fingerprint
    rows = [[e.fingerprint, e.settings()] for e in entries]
    payload = json.dumps(rows, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(b"lorastudio-datasets-v1\n" + payload).hexdigest()


def run_sampler(scan: DatasetScan, batch_size: int, seed: int, drop_last: bool = False) -> BucketBatchSampler:
    """The run's bucket sampler over DatasetScan.batch_keys (bucket + control count): with the
    entries' mix (data/mix.py) unless every item is used once per epoch."""
    mix = None
    if scan.entries and not is_plain(scan.entries):
        mix = EpochMix([it.entry for it in scan.items], scan.batch_keys(), scan.entries)
    return BucketBatchSampler(scan.batch_keys(), batch_size, seed, drop_last=drop_last, mix=mix)


def epoch_bucket_counts(scan: DatasetScan) -> dict[str, int]:
    """Samples per batch group in one epoch of the run (with the entries' repeats / weights),
    labelled as DatasetScan.batch_histogram: "WxH", or "WxH+N" (N controls) when samples differ
    in their control count."""
    if not (scan.entries and not is_plain(scan.entries)):
        return scan.batch_histogram()
    counts = EpochMix([it.entry for it in scan.items], scan.batch_keys(), scan.entries).bucket_counts()
    one = len({key[2] for key in counts}) <= 1
    return {f"{k[0]}x{k[1]}" if one else f"{k[0]}x{k[1]}+{k[2]}": counts[k] for k in sorted(counts)}


def run_steps(cfg: TrainConfig, scan: DatasetScan) -> tuple[int, int]:
    """(optimizer steps of the run, optimizer steps of one epoch) over the scan it trains on:
    `steps`, or num_epochs x the epoch's steps (its batches per bucket, grad_accum of them a step)."""
    batches = sum(-(-n // cfg.batch_size) for n in epoch_bucket_counts(scan).values())
    per_epoch = max(1, -(-batches // cfg.grad_accum))
    return (cfg.num_epochs * per_epoch if cfg.num_epochs > 0 else cfg.steps), per_epoch


def scanned_problems(cfg: TrainConfig, scan: DatasetScan, train: DatasetScan) -> list[FieldProblem]:
    """The config rules that need the scanned dataset (`scan`: all of it; `train`: what trains,
    the validation hold-out left out): entries whose weight gives them no sample of an epoch, and for
    an epoch run the periodic settings and the warmup against its length in steps (config_schedule
    checks a `steps` run's before any scan). The job service's check (jobs/validation.py) and the
    engine's preflight (training/preflight.py) both ask it, so neither accepts what the other refuses."""
    from lorastudio.config_schedule import schedule_problems

    problems = unsampled_problems(scan, cfg)
    if cfg.num_epochs > 0:
        problems += schedule_problems(cfg, run_steps(cfg, train)[0])
    return problems


def unsampled_problems(scan: DatasetScan, cfg: TrainConfig) -> list[FieldProblem]:
    """Entries whose weight gives them no sample of an epoch (their share of the epoch's N
    samples rounds to 0, e.g. weight 1 beside 10^6): accepted, they would never be trained on
    (a run of its regularisation entry alone, when it is the subject's)."""
    entries = scan.entries
    if not entries or not all(e.weight is not None for e in entries):
        return []
    samples = EpochMix([it.entry for it in scan.items], scan.batch_keys(), entries).entry_samples
    aligned = cfg.datasets is not None and len(cfg.datasets) == len(entries)
    return [
        FieldProblem(
            f"datasets.{i}.weight" if aligned else "datasets",
            f"{e.label}: weight {e.weight:g} gives it 0 of the epoch's {sum(samples)} samples (its share "
            f"rounds to nothing): raise it, or leave the entry out",
        )
        for i, (e, n) in enumerate(zip(entries, samples, strict=True))
        if n == 0 and e.images
    ]


def entry_report(scan: DatasetScan) -> list[dict[str, object]]:
    """The preflight's line per entry: label, folder, images, sampling, samples per epoch and
    share of the epoch, loss weight (a regularisation entry's includes prior_loss_weight),
    regularisation, resolution, trigger word."""
    entries = scan.entries
    if not entries:
        return []
    if is_plain(entries):
        per_entry = Counter(it.entry for it in scan.items)  # an image at k resolutions counts k times
        samples = [per_entry[i] for i in range(len(entries))]
    else:
        samples = EpochMix([it.entry for it in scan.items], scan.batch_keys(), entries).entry_samples
    total = sum(samples) or 1
    return [
        {
            "label": e.label,
            "path": str(e.root),
            "images": e.images,
            "repeats": e.repeats,
            "weight": e.weight,
            "samples_per_epoch": n,
            "share": round(n / total, 4),
            "loss_weight": e.loss_weight,
            "regularisation": e.regularisation,
            "caption_dropout": e.caption_dropout,
            "resolution": list(e.resolutions),
            "trigger_word": e.trigger_word,
        }
        for e, n in zip(entries, samples, strict=True)
    ]
