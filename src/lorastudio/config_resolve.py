"""Parsing and resolving a TrainConfig (lorastudio.config holds the schema itself).

`parse_train_config` turns a mapping (TOML, JSON, the API body) into a TrainConfig, reporting
every problem at once (pydantic's, with a "did you mean" for a misspelt setting, and the family
rules); `resolve_train_config` fills the fields left unset from the family's defaults. Both are
re-exported by lorastudio.config, where callers import them.
"""

from __future__ import annotations

import datetime
import difflib
import os
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from lorastudio.config import FAMILY_SPECIFIC_FIELDS, TrainConfig
from lorastudio.config_cache import default_cache_variants
from lorastudio.config_datasets import raw_dataset_problems, resolution_entry_problems, side_problems
from lorastudio.config_methods import FAMILY_FIELD_REASONS, resolve_loss
from lorastudio.config_preservation import preservation_problems
from lorastudio.config_rules import (
    adapter_lora_format,
    combination_problems,
    optimizer_learning_rate,
    relative_step,
)
from lorastudio.config_samples import SamplePrompt
from lorastudio.errors import ConfigError, FieldProblem, UnknownFamily
from lorastudio.generation_rules import side_problem
from lorastudio.pattern_words import pattern_problem

if TYPE_CHECKING:
    from lorastudio.families.spec import FamilySpec


def _did_you_mean(loc: tuple[Any, ...]) -> str:
    """'; did you mean X?' for an unknown top-level setting close to a TrainConfig field
    (difflib); for another trainer's key or a guessed name, what it is here
    (config_peer_keys.peer_hint: '; kohya's X is Y here ...', RELIABILITY 2000, 2041), else ''."""
    if len(loc) != 1 or not isinstance(loc[0], str):
        return ""
    from lorastudio.config_peer_keys import level_hint, peer_hint  # no torch

    # another trainer's name, not a misspelling (max_train_steps is not max_bad_steps); in capitals
    # too; a datasets entry's key given to the run (RELIABILITY 2144)
    hint = peer_hint(loc[0]) or peer_hint(loc[0].lower()) or level_hint(loc[0], in_entry=False)
    if hint:
        return hint
    close = difflib.get_close_matches(loc[0].lower(), list(TrainConfig.model_fields), n=2, cutoff=0.75)
    return f"; did you mean {' or '.join(close)}?" if close else ""


_SCALAR_BRANCHES = frozenset({"str", "int", "float", "bool"})  # pydantic's loc of a union's scalar member


def _one_branch(errors: list[Any]) -> list[Any]:
    """pydantic's errors of a `text | object` union value (sample_prompts' entries) told once:
    where an object member found problems inside the value (a dict), the scalar member's "should
    be a valid string" is dropped and the member's class name left out of the location
    (`sample_prompts.0.SamplePrompt.control` -> `sample_prompts.0.control`); a value that is
    neither keeps both. Other errors pass unchanged."""
    inside: set[tuple[Any, ...]] = set()  # union values whose object member looked inside them
    for e in errors:
        loc = e["loc"]
        for i in range(1, len(loc) - 1):
            if (
                isinstance(loc[i], str)
                and loc[i][:1].isupper()
                and any(tuple(o["loc"]) == (*loc[:i], b) for o in errors for b in _SCALAR_BRANCHES)
            ):
                inside.add(tuple(loc[:i]))
    out = []
    for e in errors:
        loc = tuple(e["loc"])
        if loc[:-1] in inside and loc[-1] in _SCALAR_BRANCHES:
            continue
        cut = next((i for i in range(1, len(loc)) if loc[:i] in inside and str(loc[i])[:1].isupper()), None)
        if cut is not None:  # the object member's class name
            loc = loc[:cut] + loc[cut + 1 :]
        out.append({**e, "loc": loc})
    return out


def _entry_did_you_mean(loc: tuple[Any, ...]) -> str:
    """'; did you mean X?' for an unknown key of a sample prompt object or a datasets entry close
    to one of its keys; for a datasets entry's key of another trainer's dataset file or a guessed
    name, what it is here (config_peer_keys.entry_hint, RELIABILITY 2141)."""
    if len(loc) != 3 or loc[0] not in ("sample_prompts", "datasets") or not isinstance(loc[2], str):
        return ""
    fields = list(SamplePrompt.model_fields)
    if loc[0] == "datasets":
        from lorastudio.config_datasets import DatasetEntry
        from lorastudio.config_peer_keys import entry_hint, level_hint  # no torch

        if hint := entry_hint(loc[2]) or entry_hint(loc[2].lower()) or level_hint(loc[2], in_entry=True):
            return hint
        fields = list(DatasetEntry.model_fields)
    close = difflib.get_close_matches(loc[2].lower(), fields, n=2, cutoff=0.75)
    return f"; did you mean {' or '.join(close)}?" if close else ""


def _pydantic_problems(err: ValidationError) -> list[FieldProblem]:
    from lorastudio.config_peer_keys import shown_key  # no torch

    out = []
    for e in _one_branch(list(err.errors())):
        loc = shown_key(".".join(str(p) for p in e["loc"])) or "(config)"  # one line, cut (2145)
        msg = e["msg"].removeprefix("Value error, ")  # pydantic's words before a validator's own
        msg = pattern_problem(e) or msg  # a pattern's words, not its regex (RELIABILITY 2270)
        if e["type"] == "extra_forbidden":
            msg = "unknown setting" + (_did_you_mean(e["loc"]) or _entry_did_you_mean(e["loc"]))
        out.append(FieldProblem(loc, msg))
    return out


def parse_train_config(data: Mapping[str, Any]) -> TrainConfig:
    """Validate raw settings into a TrainConfig and check them against the family.

    Returns the config as given (family defaults not yet filled: see resolve_train_config).
    Raises ConfigError listing every problem at once (unknown keys, bad values, settings the
    family cannot honour); UnknownFamily becomes one of those problems.
    """
    try:
        cfg = TrainConfig.model_validate(dict(data))
    except ValidationError as err:
        problems = _pydantic_problems(err)
        if isinstance(data, Mapping):
            seen = {p.field for p in problems}
            problems += [p for p in raw_dataset_problems(data) if p.field not in seen]
        fam_name = data.get("family") if isinstance(data, Mapping) else None
        if isinstance(fam_name, str):
            problems += _family_problems_raw(fam_name, data)
            problems += _problems_beside(data, problems)
        raise ConfigError(problems) from None
    problems = family_problems(cfg)
    if problems:
        raise ConfigError(problems)
    return cfg


def _top(field: str) -> str:
    return field.split(".", 1)[0]


def _problems_beside(data: Mapping[str, Any], problems: list[FieldProblem]) -> list[FieldProblem]:
    """The family's rules on single settings (setting_family_problems) for the settings beside
    those pydantic refused, which its field errors hid (the rules need a parsed config): the config
    parsed again without the refused settings. Combination rules are left out (one measured against
    the default that replaced a refused setting says nothing about the user's value). Empty when
    the rest does not parse either."""
    left_out = {_top(p.field) for p in problems}
    try:
        cfg = TrainConfig.model_validate({k: v for k, v in data.items() if k not in left_out})
        fam = families_get(cfg.family)
    except (ValidationError, UnknownFamily):
        return []
    seen = {(p.field, p.message) for p in problems}
    return [
        p
        for p in setting_family_problems(cfg, fam.spec)
        if _top(p.field) not in left_out and (p.field, p.message) not in seen
    ]


def _family_problems_raw(fam_name: str, data: Mapping[str, Any]) -> list[FieldProblem]:
    from lorastudio import families

    try:
        fam = families.get(fam_name)
    except UnknownFamily as err:
        return [FieldProblem("family", str(err))]
    given = {f for f in set(data) & set(FAMILY_SPECIFIC_FIELDS) if data[f] != _inert_value(f)}
    return [_unsupported(fam.spec.name, f) for f in sorted(given & set(refused_fields(fam.spec.supports)))]


def refused_fields(supports: frozenset[str] | set[str]) -> list[str]:
    """The family-specific settings (FAMILY_SPECIFIC_FIELDS) a family whose FamilySpec.supports
    is `supports` refuses when set explicitly, in the config's order (/api/info serves them)."""
    return [f for f in FAMILY_SPECIFIC_FIELDS if f not in supports]


def _inert_value(field: str) -> Any:
    """The value an unsupported family-specific field holds in a resolved config (null, or the
    schema default for non-nullable ones): setting it to that value asks for nothing."""
    return TrainConfig.model_fields[field].default if field in _NOT_NULLABLE else None


def _unsupported(family: str, field: str) -> FieldProblem:
    reason = FAMILY_FIELD_REASONS.get(field, "")
    return FieldProblem(field, f"the {family} family cannot honour this setting{reason}; remove it")


def families_get(name: str) -> Any:
    """lorastudio.families.get (imported late: the families import the config)."""
    from lorastudio import families

    return families.get(name)


def family_problems(cfg: TrainConfig) -> list[FieldProblem]:
    """Problems between a parsed config and its family (unknown family, unsupported settings,
    resolution not a multiple of what the family needs) and combinations that would be ignored.
    Empty list when all is well."""
    try:
        fam = families_get(cfg.family)
    except UnknownFamily as err:
        return [FieldProblem("family", str(err))]
    problems = setting_family_problems(cfg, fam.spec)
    problems += combination_problems(cfg)
    problems += _default_sampling_problems(cfg, fam.spec.defaults.get("timestep_sampling"))
    problems += preservation_problems(cfg, fam.spec.prompt_sees_controls)
    problems += fam.config_problems(cfg)
    return problems


def setting_family_problems(cfg: TrainConfig, spec: FamilySpec) -> list[FieldProblem]:
    """The family's rules on single settings, each judged by its own value and the family alone
    (unsupported settings, the resolution multiple, a sample's size, fused projections, wide
    compile, the control size, spec_rule_problems): also reported beside pydantic's field errors."""
    problems = [
        _unsupported(spec.name, f)
        for f in sorted(cfg.model_fields_set & set(refused_fields(spec.supports)))
        if getattr(cfg, f) != _inert_value(f)
    ]
    res = cfg.resolution if cfg.resolution is not None else spec.defaults.get("resolution")
    mult = spec.resolution_multiple
    problems += side_problems("resolution", res, mult, spec.name)
    problems += resolution_entry_problems(cfg, mult, spec.name)
    for i, entry in enumerate(cfg.sample_prompts):  # a sample's own size (config_samples.py)
        for side in ("width", "height"):
            value = getattr(entry, side, None)
            # a generation's rule and words (generation_rules), as `lorastudio generate` says them
            if value is not None and (
                problem := side_problem(f"sample_prompts.{i}.{side}", value, spec.name)
            ):
                problems.append(problem)
    if cfg.fuse_projections == "on" and not spec.fused_projection_groups:
        problems.append(
            FieldProblem(
                "fuse_projections",
                f"{spec.title}'s {spec.denoiser} has no projections that share an input to"
                " fuse: use 'auto' or 'off'",
            )
        )
    if cfg.compile == "wide" and not spec.wide_compile_blocks:
        problems.append(
            FieldProblem(
                "compile",
                f"'wide' compiles a U-Net's glue around its attention blocks; {spec.title}'s repeated"
                " blocks already hold all its compute: use 'on' or 'auto'",
            )
        )
    if cfg.control_resolution != "pipeline" and spec.control_sizing is None:
        problems.append(
            FieldProblem(
                "control_resolution", f"{spec.title} takes no control images: leave it at 'pipeline'"
            )
        )
    if cfg.control_dirs and spec.control_images[1] == 0:
        problems.append(
            FieldProblem(
                "control_dirs",
                f"{spec.title} trains text-to-image only and takes no control images: remove control_dirs "
                "(or train an edit family)",
            )
        )
    if spec.control_images[1] == 0:  # known from the config: named with its other problems
        problems += [
            FieldProblem(
                "sample_prompts",
                f"sample prompt {i}: {spec.name} takes no reference images (a text-to-image family)",
            )
            for i, entry in enumerate(cfg.sample_prompts)
            if isinstance(entry, SamplePrompt) and entry.controls
        ]
    return problems + spec_rule_problems(cfg, spec)


def spec_rule_problems(cfg: TrainConfig, spec: FamilySpec) -> list[FieldProblem]:
    """The family's declarative refusals (FamilySpec.refused_attention, max_sequence_length_max,
    refuses_on), the rules /api/info serves the web form: an attention_backend it cannot run, a
    max_sequence_length over what its text encoder reads, a boolean setting it refuses on."""
    problems = []
    if cfg.attention_backend in spec.refused_attention:
        problems.append(FieldProblem("attention_backend", spec.refused_attention[cfg.attention_backend]))
    cap = spec.max_sequence_length_max
    if cap is not None and cfg.max_sequence_length is not None and cfg.max_sequence_length > cap:
        problems.append(
            FieldProblem("max_sequence_length", f"{spec.title}'s text encoder takes at most {cap} tokens")
        )
    problems += [FieldProblem(name, why) for name, why in spec.refuses_on.items() if getattr(cfg, name)]
    return problems


def _default_sampling_problems(cfg: TrainConfig, family_default: Any) -> list[FieldProblem]:
    """logit_mean / logit_std set while timestep_sampling is left to a family default other than
    logit_normal (Chroma's and Krea 2's "sigmoid"): they would be ignored, so they are refused."""
    if "timestep_sampling" in cfg.model_fields_set or family_default in (None, "logit_normal"):
        return []
    return [
        FieldProblem(
            name,
            f"only applies to timestep_sampling='logit_normal'; this family samples with "
            f"{family_default!r} by default: set timestep_sampling='logit_normal' too",
        )
        for name in ("logit_mean", "logit_std")
        if name in cfg.model_fields_set and getattr(cfg, name) != TrainConfig.model_fields[name].default
    ]


# Settings where an explicit null is meaningful ("off"), so a family default must not replace it.
NULL_MEANS_OFF = frozenset({"snr_gamma", "noise_offset", "flow_shift", "max_grad_norm"})


def resolve_train_config(cfg: TrainConfig) -> TrainConfig:
    """Fill every family default and null the family-specific fields the family does not use.

    A field takes the family default (FamilySpec.defaults) when the user did not set it, or set
    it to null where null has no meaning of its own. Returns a new config; `cfg` is unchanged.
    Raises ConfigError if the config is not valid for its family.
    """
    from lorastudio import families

    problems = family_problems(cfg)
    if problems:
        raise ConfigError(problems)
    fam = families.get(cfg.family)
    values = cfg.model_dump()
    for key, default in fam.spec.defaults.items():
        explicit = key in cfg.model_fields_set
        if not explicit or (values[key] is None and key not in NULL_MEANS_OFF):
            values[key] = default
    for key in refused_fields(fam.spec.supports):
        values[key] = _inert_value(key)
    values["learning_rate"] = optimizer_learning_rate(cfg, values["learning_rate"])
    values["lora_format"] = adapter_lora_format(cfg, values["lora_format"])
    resolve_loss(cfg, values)
    _init_lora_rank(cfg, values)
    if values["lora_alpha"] is None:
        values["lora_alpha"] = float(values["lora_rank"])
    if values["cache_variants"] is None:
        values["cache_variants"] = default_cache_variants(cfg)
    if values["output_name"] is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        values["output_name"] = f"{fam.spec.name}-{stamp}"
    resolved = TrainConfig.model_validate(values)
    needed = (
        ("resolution", "lora_rank") if relative_step(cfg) else ("resolution", "learning_rate", "lora_rank")
    )
    missing = [k for k in needed if getattr(resolved, k) is None]
    if missing:
        raise ConfigError([FieldProblem(k, f"no default for {fam.spec.name}; set it") for k in missing])
    return resolved


def _init_lora_rank(cfg: TrainConfig, values: dict[str, Any]) -> None:
    """With init_lora: the file's rank and alpha in `values` where the user left lora_rank /
    lora_alpha unset (training/adapters/init_lora_rules.file_rank_alpha; a file that cannot be read leaves
    the family's: the preflight names the file's problem)."""
    given = {k for k in cfg.model_fields_set if getattr(cfg, k) is not None}
    if cfg.init_lora is None or {"lora_rank", "lora_alpha"} <= given:
        return
    from lorastudio.settings import get_settings
    from lorastudio.training.adapters.init_lora_rules import file_rank_alpha

    facts = file_rank_alpha(cfg, get_settings())
    if facts is None:
        return
    rank, alpha = facts
    if "lora_rank" not in given:
        values["lora_rank"] = rank
    if "lora_alpha" not in given:
        values["lora_alpha"] = alpha  # None (layers of several alphas): the rank, below


def free_output_name(name: str, outputs_dir: Path, taken: Collection[str] = ()) -> str:
    """A defaulted output name (`<family>-<local date-time>`, resolve_train_config) made free:
    `name` itself, else the first of `name-2`, `name-3`, ... that no folder in `outputs_dir` and
    no name in `taken` (a queued or running job's) holds. The stamp is the wall clock's, to the
    second: two runs begun in one second, an hour repeated when daylight saving time ends, or a
    clock set back to a time a run was named at gave a name taken already, and the run was
    refused for a name its user never chose."""
    for n in range(1, 10_000):
        candidate = name if n == 1 else f"{name}-{n}"
        if candidate not in taken and not os.path.lexists(outputs_dir / candidate):
            return candidate
    return name  # all taken: refused with the reason as before (output_name_problems)


# Family-specific fields whose schema default is not null: inert for families that do not use them.
_NOT_NULLABLE = ("timestep_sampling", "logit_mean", "logit_std", "train_text_encoder")
