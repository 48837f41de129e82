"""`--set a.b.c=value`: a value set inside a config's table or list, by the dotted path that the
config's own problems name (`datasets.0.repeats: ...`, `sample_prompts.1.seed: ...`).

Before, every `--set` key was a top-level setting: `--set datasets.0.repeats=4` (the path an
error had just named; Hydra's and OmegaConf's overrides take it, ai-toolkit's users write nested
YAML) was "datasets.0.repeats: unknown setting", and changing one entry meant retyping the whole
list as JSON. Written by hand: the dotted path walks the config file's own dict, which no
override library reads (OmegaConf's would pull in its own YAML semantics and types).

A path walks existing tables and lists only. A list step is an index of an existing entry; in a
table a step that names no table or list held there ends the walk, the rest of the path being
the key (`rank_pattern.blocks.0.to_q=8` sets the module pattern "blocks.0.to_q"). A table setting
that the config lacks (preservation, rank_pattern, alpha_pattern) starts empty; a list setting
that it lacks, an index past the end or a step into a plain value is refused, naming the path.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from lorastudio.digits import whole_number
from lorastudio.errors import FieldProblem


def set_nested(out: dict[str, Any], key: str, value: Any) -> FieldProblem | None:
    """Set `value` at the dotted `key` ("head.rest...") inside `out` (changed in place; the
    tables and lists on the way are copied first, never the caller's own). None when set, else
    the problem (field `--set KEY`). A head that is no setting of TrainConfig is set as the flat
    key, for the config's check to refuse as an unknown setting (its did-you-mean)."""
    head, _, rest = key.partition(".")
    parts = rest.split(".")
    if not head or "" in parts:
        return FieldProblem(f"--set {key}", "an empty part in the dotted path")
    kind = _setting_kind(head)
    if kind is None:
        out[key] = value
        return None
    if kind == "value":
        return FieldProblem(f"--set {key}", f"{head} is a single value, nothing inside: --set {head}=VALUE")
    if head not in out or out[head] is None:
        if kind != "table":
            return FieldProblem(
                f"--set {key}", f"the config has no {head} to set inside: give it whole, --set '{head}=[...]'"
            )
        out[head] = {}
    node = out[head] = _copied(out[head])
    where = head
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            # ASCII digits only, and few (lorastudio.digits): "²" and a 5,000-digit index raised
            # from int() (RELIABILITY 2103); "٣" is an index no problem path ever names
            index = whole_number(part)
            if index is None or index >= len(node):
                span = f"{where}.0 to {where}.{len(node) - 1}" if node else "none"
                return FieldProblem(f"--set {key}", f"{where} has {len(node)} entries ({span})")
            if last:
                node[index] = value
                return None
            node[index] = _copied(node[index])
            node, where = node[index], f"{where}.{part}"
        elif isinstance(node, dict):
            held = node.get(part)
            if last or not isinstance(held, dict | list):
                node[".".join(parts[i:])] = value
                return None
            node[part] = _copied(held)
            node, where = node[part], f"{where}.{part}"
        else:
            return FieldProblem(f"--set {key}", f"{where} is {node!r}, not a table or a list")
    return None  # not reached: the last part always sets


def _copied(node: Any) -> Any:
    """A shallow copy of a table or list (the caller's data is never changed), else `node`."""
    if isinstance(node, dict):
        return dict(node)
    if isinstance(node, list):
        return list(node)
    return node


@cache
def _kinds() -> dict[str, str]:
    """Each TrainConfig setting's kind for a dotted path: "table" (an object: preservation,
    rank_pattern, ...), "list" (datasets, sample_prompts, target_modules, ...) or "value"."""
    from lorastudio.config import TrainConfig

    schema = TrainConfig.model_json_schema()
    out = {}
    for name, field in schema["properties"].items():
        options = field.get("anyOf", [field])
        types = {option.get("type") for option in options}
        if "$ref" in str(options) and "array" not in types or "object" in types:
            out[name] = "table"
        elif "array" in types:
            out[name] = "list"
        else:
            out[name] = "value"
    return out


def _setting_kind(name: str) -> str | None:
    """`name`'s kind (_kinds), None when it is no setting."""
    return _kinds().get(name)


@cache
def nested_text_fields(head: str) -> frozenset[str]:
    """The text-only fields (a string or null) of the objects a table or list setting `head`
    holds (datasets' path, sample_prompts' prompt, ...): a `--set datasets.0.path=2024` keeps
    the text typed, as a top-level text setting does (config_file.text_settings)."""
    from lorastudio.config import TrainConfig

    schema = TrainConfig.model_json_schema()
    field = str(schema["properties"].get(head, ""))
    out: set[str] = set()
    for name, model in schema.get("$defs", {}).items():
        if f"#/$defs/{name}'" not in field:
            continue
        for prop, spec in model.get("properties", {}).items():
            types = {option.get("type") for option in spec.get("anyOf", [spec])}
            if "string" in types and types <= {"string", "null"}:
                out.add(prop)
    return frozenset(out)


@cache
def text_items(head: str) -> bool:
    """Whether list setting `head`'s entries may be text (control_dirs' folders, lora_targets'
    suffixes, sample_prompts' prompts): a `--set control_dirs.0=2024` keeps the folder name typed,
    as an entry's text field does (nested_text_fields); before, it was the number 2024, refused
    "Input should be a valid string" (RELIABILITY 2013)."""
    from lorastudio.config import TrainConfig

    field = TrainConfig.model_json_schema()["properties"].get(head, {})
    for option in field.get("anyOf", [field]):
        items = option.get("items")
        if not (option.get("type") == "array" and isinstance(items, dict)):
            continue
        if "string" in {kind.get("type") for kind in items.get("anyOf", [items])}:
            return True
    return False
