"""README's settings reference: every TrainConfig field with its default, its values and its meaning.

The tables are rendered from the models themselves (TrainConfig's field groups, the `datasets`
entry, the `preservation` table and the sample-prompt object) and from each family's defaults,
so README cannot drift from the code: tests/unit/test_docs_reference.py compares README's block
with `reference_markdown()`. Rewrite the block after changing a field:

    python -m lorastudio.config_reference README.md

Hand-written because the field metadata (annotated-types constraints, Literal choices) has to be
read from pydantic's FieldInfo; pydantic renders JSON schema, not a Markdown table.
"""

from __future__ import annotations

import os
import sys
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from lorastudio.config_datasets import DatasetEntry
from lorastudio.config_fields_data import DataFields
from lorastudio.config_fields_objective import ObjectiveFields
from lorastudio.config_fields_runtime import RuntimeFields
from lorastudio.config_fields_source import SourceFields
from lorastudio.config_fields_training import TrainingFields
from lorastudio.config_preservation import Preservation
from lorastudio.config_samples import SamplePrompt

START = "<!-- settings-reference:start (generated: python -m lorastudio.config_reference README.md) -->"
END = "<!-- settings-reference:end -->"


def _groups() -> list[tuple[str, type[BaseModel]]]:
    """TrainConfig's field groups in form order, then the nested objects."""
    return [
        ("Model, data and output", SourceFields),
        ("Images, captions, masks and validation", DataFields),
        ("Schedule, adapter and optimizer", TrainingFields),
        ("Memory, speed, checkpoints, samples", RuntimeFields),
        ("Objective (loss and noise)", ObjectiveFields),
        ("A `[[datasets]]` entry", DatasetEntry),
        ("`preservation = {...}`", Preservation),
        ("A `sample_prompts` object", SamplePrompt),
    ]


def _value(v: Any) -> str:
    """A value as the TOML / JSON config spells it."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return str(v)


def _type_name(tp: Any) -> str:
    """A short name of an annotation: Literal choices, unions, lists, nested models."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Literal:
        return " \\| ".join(_value(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(_type_name(a) for a in args if a is not type(None))
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (list, tuple, dict):
        inner = ", ".join(_type_name(a) for a in args if a is not Ellipsis)
        return f"{origin.__name__}[{inner}]"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return "table"
    return {str: "text", int: "integer", float: "number", bool: "true \\| false"}.get(
        tp, getattr(tp, "__name__", str(tp))
    )


def _bounds(meta: Iterable[Any]) -> list[str]:
    """The annotated-types constraints of a field (and of its union members) as text."""
    out: list[str] = []
    for m in meta:
        if isinstance(m, at.Ge):
            out.append(f">= {_value(m.ge)}")
        elif isinstance(m, at.Gt):
            out.append(f"> {_value(m.gt)}")
        elif isinstance(m, at.Le):
            out.append(f"<= {_value(m.le)}")
        elif isinstance(m, at.Lt):
            out.append(f"< {_value(m.lt)}")
        elif isinstance(m, at.MinLen) and m.min_length > 1:
            out.append(f"at least {m.min_length} long")
        elif isinstance(m, at.MaxLen):
            out.append(f"at most {m.max_length} long")
        elif getattr(m, "pattern", None):
            out.append(f"matches `{m.pattern}`")
    return out


def _annotated_bounds(tp: Any) -> list[str]:
    """Bounds carried inside the annotation (e.g. `int | Annotated[int, Ge(64)]`)."""
    out: list[str] = []
    for arg in typing.get_args(tp):
        if typing.get_origin(arg) is typing.Annotated:
            for meta in typing.get_args(arg)[1:]:  # constraints, or a Field(...) holding them
                out += _bounds(meta.metadata if isinstance(meta, FieldInfo) else [meta])
        else:
            out += _annotated_bounds(arg)
    return out


def values_text(info: FieldInfo) -> str:
    """What a field takes: its type or choices, its bounds, and null where null is allowed."""
    tp = info.annotation
    text = _type_name(tp)
    bounds = _bounds(info.metadata) + _annotated_bounds(tp)
    if bounds:
        text += ", " + ", ".join(dict.fromkeys(bounds))
    if type(None) in typing.get_args(tp):
        text += "; or null"
    return text


def _family_defaults(name: str) -> dict[str, list[str]]:
    """The families whose own default replaces the field's, by value (as the config spells it)."""
    from lorastudio import families

    by_value: dict[str, list[str]] = {}
    for fam in families.all_families():
        if name in fam.spec.defaults:
            by_value.setdefault(_value(fam.spec.defaults[name]), []).append(fam.spec.name)
    return by_value


def default_text(name: str, info: FieldInfo, with_families: bool) -> str:
    """A field's default as the config spells it, with the families' own defaults after it: the
    value most families share first ("16; flux2-klein: 32"), the field's own default first when
    some family keeps it ("null; flux, flux2, flux-kontext: 1")."""
    from lorastudio import families

    if info.is_required():
        return "required"
    own = _value(info.default_factory() if info.default_factory else info.default)  # type: ignore[call-arg]
    by_value = _family_defaults(name) if with_families else {}
    by_value.pop(own, None)  # a family default equal to the field's own changes nothing
    if not by_value:
        return own
    if sum(len(v) for v in by_value.values()) == len(families.names()):  # every family sets it
        main = max(by_value, key=lambda v: len(by_value[v]))
        rest = {v: n for v, n in by_value.items() if v != main}
        head = main + ("" if rest else " (every family)")
    else:
        head, rest = own, by_value
    return "; ".join([head, *(f"{', '.join(names)}: {value}" for value, names in rest.items())])


def _supported_by(name: str) -> str:
    """ "(families: a, b)" for a family-specific field, else ""."""
    from lorastudio import families
    from lorastudio.config import FAMILY_SPECIFIC_FIELDS

    if name not in FAMILY_SPECIFIC_FIELDS:
        return ""
    names = [f.spec.name for f in families.all_families() if name in f.spec.supports]
    return f" (only {', '.join(names)}; refused for the others)"


def _cell(text: str) -> str:
    """Free text made safe for a table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def reference_markdown() -> str:
    """The whole generated block, markers included."""
    lines = [START, ""]
    for title, model in _groups():
        top = model.__module__.startswith("lorastudio.config_fields_")
        lines += [f"#### {title}", "", "| setting | default | values | meaning |", "|---|---|---|---|"]
        for name, info in model.model_fields.items():
            meaning = (info.description or "") + (_supported_by(name) if top else "")
            default = default_text(name, info, with_families=top)
            lines.append(f"| `{name}` | {_cell(default)} | {values_text(info)} | {_cell(meaning)} |")
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def replace_block(text: str, block: str) -> str:
    """`text` with the part from START to END replaced by `block`.

    Raises:
        ValueError: the markers are missing or out of order.
    """
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the markers {START!r} ... {END!r} are missing")
    return text[:start] + block + text[end + len(END) :]


def main(argv: list[str]) -> int:
    """`python -m lorastudio.config_reference README.md`: rewrite the block (staged, then renamed)."""
    if len(argv) != 1:
        print("usage: python -m lorastudio.config_reference README.md", file=sys.stderr)
        return 2
    path = Path(argv[0])
    new = replace_block(path.read_text(encoding="utf-8"), reference_markdown())
    staged = path.with_name(f".{path.name}.tmp")
    staged.write_text(new, encoding="utf-8")
    os.replace(staged, path)
    print(f"wrote the settings reference into {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
