"""The dataset's part of a run's identity under its fingerprint rule (no torch here).

Rule 2 (session 40, RELIABILITY 2040): a paired sample's controls are keyed by their path under
the target's folder (data.scan.dataset_fingerprint), so a paired run resumes once its dataset
folder moved (a home moved or copied, a dataset renamed), as an unpaired one always could. A run
whose data holds controls records `dataset_rule` 2 beside `dataset_fingerprint`; an unpaired run
records nothing (its fingerprint is the same under either rule: its checkpoints of either version
resume bitwise). A paired checkpoint without the record (rule 1: each control by its absolute path)
is compared under rule 1 with its controls' paths taken under the folders its config recorded
(`controls_then`): it resumes where it was and where it moved to alike, and a changed control is
still refused naming the file (`dataset_files`). The resumed run records rule 2 (its own
checkpoints compare by the new rule). The version before refuses a rule-2 checkpoint (a key it
does not know): its absolute paths would never match.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lorastudio.data.scan import DATASET_RULE

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.data import DatasetScan
    from lorastudio.families.base import FamilySpec
    from lorastudio.settings import Settings

DATASET_RULE_KEY = "dataset_rule"


def dataset_record(scan: DatasetScan) -> dict[str, Any]:
    """The identity's dataset fields of `scan` under the current rule: its fingerprint, and the
    rule where its samples hold controls."""
    record: dict[str, Any] = {"dataset_fingerprint": scan.fingerprint}
    if scan.controls_per_image():
        record[DATASET_RULE_KEY] = DATASET_RULE
    return record


def saved_dataset_rule(saved: Mapping[str, Any]) -> int:
    """The dataset fingerprint rule of a checkpoint's identity (1: written before it was recorded)."""
    rule = saved.get(DATASET_RULE_KEY)
    return rule if isinstance(rule, int) and not isinstance(rule, bool) and rule >= 1 else 1


def dataset_record_for(
    saved: Mapping[str, Any], scan: DatasetScan, rule1: Callable[[], str]
) -> dict[str, Any]:
    """The dataset fields of this run (`scan`) as the checkpoint whose identity is `saved`
    compares them: its own (dataset_record) unless the checkpoint is of rule 1 and the data holds
    controls, then the fingerprint `rule1()` computes (rule1_fingerprint: a scan under rule 1),
    with no rule recorded, as the checkpoint has none."""
    if saved_dataset_rule(saved) >= DATASET_RULE or not scan.controls_per_image():
        return dataset_record(scan)
    return {"dataset_fingerprint": rule1()}


def controls_then(cfg: TrainConfig, recorded: Mapping[str, Any], datasets_dir: Path) -> dict[Path, Path]:
    """Each folder of the run (`cfg`: its data_dir or datasets entries' paths, its control_dirs)
    that is now elsewhere than the checkpoint's config (`recorded`) named it: folder now -> the
    folder then, the deepest first (data.scan.dataset_fingerprint's rule-1 `controls_then`). A
    name under the datasets folder is taken under `datasets_dir`; both are taken with their
    symbolic links followed (the scan's real paths, which rule 1 keyed: RELIABILITY 2143); a
    recorded value that is not text is left out (nothing to rebase onto)."""
    from lorastudio.config_datasets import config_entries
    from lorastudio.data.paths import resolve_dataset_dir
    from lorastudio.errors import ConfigError

    raw = recorded.get("datasets")
    then_paths = (
        [e.get("path") if isinstance(e, Mapping) else None for e in raw]
        if isinstance(raw, list)
        else [recorded.get("data_dir")]
    )
    recorded_dirs = recorded.get("control_dirs")
    pairs = list(zip([e.path for e in config_entries(cfg)], then_paths, strict=False))
    pairs += zip(cfg.control_dirs, recorded_dirs if isinstance(recorded_dirs, list) else [], strict=False)
    out: dict[Path, Path] = {}
    for now, then in pairs:
        if not isinstance(then, str) or not then.strip():
            continue
        now_path = resolve_dataset_dir(now, datasets_dir, allow_outside_root=True)
        try:  # its links followed as now's are: rule 1 keyed the controls the scan found, real paths
            then_path = resolve_dataset_dir(then, datasets_dir, allow_outside_root=True)
        except ConfigError:  # not a folder value (a NUL): as written
            then_path = Path(then) if Path(then).is_absolute() else datasets_dir / then
        if now_path != then_path:
            out[now_path] = then_path
    return dict(sorted(out.items(), key=lambda kv: -len(kv[0].parts)))


def rule1_fingerprint(
    cfg: TrainConfig,
    recorded: Mapping[str, Any],
    spec: FamilySpec,
    settings: Settings,
    control_images: tuple[int, int] | None = None,
) -> str:
    """The fingerprint of the run's data (`cfg`, resolved) under rule 1, its controls keyed by the
    paths the checkpoint's config (`recorded`) gives them: a scan as the run's (with its masks and
    entries; `control_images`, the checkpoint's flavour's, as scan_for_run takes it) that decodes
    nothing anew (the run's own scan just checked the files; their digests are remembered).
    Raises what scan_for_run raises."""
    from lorastudio.data.entries import resolve_entries
    from lorastudio.data.pairs import resolve_control_dirs
    from lorastudio.data.run_scan import scan_for_run

    entries = resolve_entries(cfg, settings.datasets_dir, allow_outside_root=True)
    control_dirs = resolve_control_dirs(cfg.control_dirs, settings.datasets_dir, allow_outside_root=True)
    scan = scan_for_run(
        entries,
        cfg,
        spec,
        settings,
        control_dirs,
        control_images,
        decode_budget_s=0,
        resume=True,
        controls_then=controls_then(cfg, recorded, settings.datasets_dir),
    )
    return scan.fingerprint
