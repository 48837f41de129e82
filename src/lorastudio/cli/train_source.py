"""What a `lorastudio train` command trains (cli/train_cmd.py): its config file with `--set`
overrides, or with `--resume` a checkpoint's settings (a bare run name found under outputs/)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from lorastudio.cli.config_file import apply_overrides, load_config_file, localize_paths
from lorastudio.errors import ConfigError, FieldProblem

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.name_reserve import NameHold


def run_config(config: Path | None, overrides: list[str], resume: Path | None) -> tuple[Any, Path | None]:
    """(TrainConfig, checkpoint folder or None) of a `train` command. Without CONFIG, --resume
    takes the checkpoint's settings with --set overrides (only those that do not change the
    maths; `datasets.N.path=...` names a moved entry of a multi-dataset run alone). Raises ConfigError (no CONFIG and no --resume, bad settings), NotFound."""
    from lorastudio.config import parse_train_config
    from lorastudio.jobs.validation import with_resolved_base
    from lorastudio.settings import get_settings
    from lorastudio.training.resume.checkpoint import find_checkpoint, read_checkpoint_info, resume_settings
    from lorastudio.training.resume.identity_base import RELOCATABLE
    from lorastudio.training.resume.relocation import moved_problems, with_entry_paths

    checkpoint = find_checkpoint(resume.resolve()) if resume is not None else None
    if config is not None:  # base_model as the job service stores it (a checkpoint's is already)
        data = localize_paths(apply_overrides(load_config_file(config), overrides))
        return with_resolved_base(parse_train_config(data), get_settings()), checkpoint
    if checkpoint is not None:  # --set paths taken against this directory, as in a config file
        info = read_checkpoint_info(checkpoint)
        # --set datasets.N.path=...: a moved entry named alone, the recorded list with that path
        # replaced (as the API's and the web's resume take it: training/resume/relocation.with_entry_paths)
        given = localize_paths(with_entry_paths(info["config"], apply_overrides({}, overrides, nested=False)))
        data = resume_settings(info, given)
        moved = moved_problems(data)  # a base or dataset recorded where it is no more (a moved home)
        if moved:
            raise ConfigError(moved)
        cfg = parse_train_config(data)
        return (with_resolved_base(cfg, get_settings()) if RELOCATABLE & set(given) else cfg), checkpoint
    raise ConfigError([FieldProblem("config", "give a config file, or --resume a run folder or checkpoint")])


def resume_folder(resume: Path) -> Path:
    """`--resume NAME`: a bare name that is nothing here is the run of that name under the
    studio's outputs/ (as `lora list` and `generate --lora` take it), when that folder exists;
    any other path as given (find_checkpoint says what is wrong with it)."""
    from lorastudio.settings import get_settings
    from lorastudio.user_paths import is_dir, lexists

    text = str(resume)
    if "/" in text or text.startswith((".", "~")) or lexists(resume):
        return resume
    named = get_settings().outputs_dir / text
    return named if is_dir(named) else resume


def default_named(cfg: TrainConfig) -> tuple[TrainConfig, NameHold]:
    """`cfg` (no output_name) with its default name, `<family>-<local date-time>`, or `-2`,
    `-3`, ... when a folder or another namer's reservation holds it (a run begun in the same
    second), and the reservation (name_reserve.py: release it when the run ended)."""
    from lorastudio.config import resolve_train_config
    from lorastudio.name_reserve import reserve_output_name
    from lorastudio.settings import get_settings

    hold = reserve_output_name(str(resolve_train_config(cfg).output_name), get_settings().outputs_dir)
    return cfg.model_copy(update={"output_name": hold.name}), hold
