"""The imported settings checked by the strict config and written as a lorastudio run config
(no torch).

`settle` runs the same checks as `lorastudio train --check` does on a config file before it
looks at the disk (parse_train_config: the schema, unknown keys, the family's rules and the
combinations refused together; resolve_train_config: the family's defaults): a setting the check
refuses (a value out of our range, a setting the family cannot honour, a combination) is taken
out and its report line says why, and the check runs again until it passes. A problem with a
setting the import did not write (no base model, no dataset folder in the file) refuses the
import, naming the file. TOML has no null: a setting carried as null (off) is left out of a .toml
and its line says how to ask for it; a .json keeps it.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from lorastudio.config_import.report import Draft
from lorastudio.config_import.samples import drop_unapplied_guidance
from lorastudio.errors import ConfigError, FieldProblem

_MOST_ROUNDS = 64
_NEEDED = frozenset({"family", "base_model"})


def settle(draft: Draft, toml: bool, need_data: bool = True) -> None:
    """Make `draft.settings` pass the strict config (see the module's docstring); without
    `need_data` a config without an image folder passes too (the web form chooses its dataset:
    checked with a stand-in data_dir, never written). Raises ConfigError naming the file: its own
    faults (draft.problems), or a problem of a setting this import did not write."""
    if draft.problems:
        raise ConfigError(draft.problems)
    if toml:
        _drop_nulls(draft)
    _one_cycle(draft)
    drop_unapplied_guidance(draft)  # a sample prompt's scale a run refuses (RELIABILITY 1811)
    stand_in = {} if need_data or draft.settings.get("datasets") else {"data_dir": "dataset"}
    for _ in range(_MOST_ROUNDS):
        problems = _check({**draft.settings, **stand_in})
        if not problems:
            return
        if not any(_refuse(draft, p) for p in problems) and not any(
            _culprit(draft, p, stand_in) for p in problems
        ):
            raise ConfigError([_fatal(draft, p) for p in problems])
    raise ConfigError([FieldProblem(draft.file.name, "the imported config did not settle: report this")])


def _one_cycle(draft: Draft) -> None:
    """A cosine_with_restarts schedule without two cycles (kohya's default is 1) is the cosine
    schedule, which our strict config asks for by name."""
    if draft.settings.get("lr_scheduler") == "cosine_with_restarts" and draft.settings.get(
        "lr_cycles", 1
    ) in (None, 1):
        draft.amend("lr_scheduler", "cosine", "one cycle of cosine_with_restarts is the cosine schedule")
        if "lr_cycles" in draft.settings:
            draft.refuse("lr_cycles", "one cycle: the cosine schedule")


def _culprit(draft: Draft, problem: FieldProblem, stand_in: dict[str, Any]) -> bool:
    """For a problem of a setting this import did not write (a combination: a schedule that needs
    a setting the peer has none for), take out the setting it wrote whose absence ends the
    problem, the latest written first; whether one did."""
    for ours in reversed(list(draft.origin)):
        if ours.split(".")[0] in _NEEDED:
            continue
        trial = copy.deepcopy({**draft.settings, **stand_in})
        _remove_key(trial, ours)
        if problem not in _check(trial):
            return draft.refuse(ours, f"{problem.field}: {problem.message}")
    return False


def _remove_key(settings: dict[str, Any], ours: str) -> None:
    """Remove `ours` ("key" or "datasets.N.key") from a trial copy of the settings."""
    head, _, rest = ours.partition(".")
    if not rest:
        settings.pop(head, None)
    else:
        index, _, key = rest.partition(".")
        settings[head][int(index)].pop(key, None)


def _fatal(draft: Draft, problem: FieldProblem) -> FieldProblem:
    """A problem the import cannot take out, named with the file (a missing base or image folder in the user's words)."""
    if problem.field == "base_model" and "required" in problem.message.lower():
        return FieldProblem(
            f"{draft.file.name}: base_model", "the file names no base model: pass --base-model"
        )
    if problem.field == "data_dir" and "base_model" in draft.settings:
        return FieldProblem(
            f"{draft.file.name}: data_dir", "the file names no image folder this import reads"
        )
    return FieldProblem(f"{draft.file.name}: the imported config's {problem.field}", problem.message)


def _check(settings: dict[str, Any]) -> list[FieldProblem]:
    """The strict config's problems with `settings` (parse and resolve, as `train --check`), none when it takes them."""
    from lorastudio.config import parse_train_config, resolve_train_config

    try:
        resolve_train_config(parse_train_config(settings))
    except ConfigError as err:
        return err.problems
    return []


def _refuse(draft: Draft, problem: FieldProblem) -> bool:
    """Take out the setting `problem` names (or the setting that holds it: a sample prompt's
    width is sample_prompts') when this import wrote it; whether it did."""
    parts = problem.field.split(".")
    if parts[0] in _NEEDED:
        return False  # the run cannot be without them: the import is refused, saying why
    return any(draft.refuse(".".join(parts[:end]), problem.message) for end in range(len(parts), 0, -1))


def _drop_nulls(draft: Draft) -> None:
    """Take out the settings carried as null: a .toml cannot hold them (each line says how to ask for it)."""
    for ours in [k for k in draft.origin if _value(draft.settings, k) is None]:
        draft.nulls.append(ours)  # said on the .toml's top too (RELIABILITY 1997)
        draft.refuse(
            ours,
            f"TOML has no null: add `--set {ours}=null` to `lorastudio train`, or import with --out FILE.json",
            verb="left out of the .toml, not refused",
            keep=True,  # a peer default filled says whose rule chose it (RELIABILITY 2300)
        )


def _value(settings: dict[str, Any], ours: str) -> Any:
    """The value of `ours` ("key" or "datasets.N.key") in `settings`."""
    head, _, rest = ours.partition(".")
    if not rest:
        return settings.get(head)
    index, _, key = rest.partition(".")
    return settings[head][int(index)].get(key)


def _ordered(settings: dict[str, Any]) -> dict[str, Any]:
    """`settings` in the order of TrainConfig's fields (the settings reference's order)."""
    from lorastudio.config import TrainConfig

    order = {name: i for i, name in enumerate(TrainConfig.model_fields)}
    return dict(sorted(settings.items(), key=lambda kv: order.get(kv[0], len(order))))


_COMMENT_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # what a TOML comment cannot hold, and newline


def comment_text(text: str) -> str:
    """`text` (a file's name) fit for one TOML comment line: each control character TOML refuses
    there, and a line break, written as its escape (`\\x1b`, `\\n`). A name holding one (ESC, DEL,
    CR: the API's `name`, a file on disk) was tomlkit's ValueError: a 500, a CLI traceback."""
    return _COMMENT_CONTROLS.sub(lambda m: repr(m.group())[1:-1], text)


def render(draft: Draft, toml: bool) -> str:
    """The settled config as the text of a .toml or .json run config, its source named on top
    (TOML: a comment)."""
    settings = _ordered(draft.settings)
    if not toml:
        return json.dumps(settings, indent=2, ensure_ascii=False) + "\n"
    import tomlkit

    doc = tomlkit.document()
    shown = comment_text(draft.file.name)
    doc.add(tomlkit.comment(f"lorastudio run config imported from {shown} ({draft.kind})"))
    doc.add(tomlkit.comment("by `lorastudio config import`; check it with `lorastudio train FILE --check`"))
    if draft.nulls:  # else the run trains at the default a file read alone cannot tell from "off"
        sets = " ".join(f"--set {k}=null" for k in draft.nulls)
        doc.add(
            tomlkit.comment(
                f"off in the imported config (null), which TOML cannot write: {', '.join(draft.nulls)}"
            )
        )
        doc.add(tomlkit.comment(f"(left out: their defaults apply) train with `{sets}` to keep them off"))
    tables = {k: v for k, v in settings.items() if k == "datasets"}
    for key, value in settings.items():
        if key not in tables:
            doc.add(key, value)
    if "datasets" in tables:
        array = tomlkit.aot()
        for entry in tables["datasets"]:
            table = tomlkit.table()
            for key, value in entry.items():
                table.add(key, value)
            array.append(table)
        doc.add("datasets", array)
    return tomlkit.dumps(doc)
