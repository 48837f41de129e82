"""Do a pipeline folder's components belong together? Checked from their config.json files
(a few small JSON reads) against the family's declared config facts (FamilySpec.config_rules,
families/config_rules.py), so a component of the right class from another model is refused
before any load, naming it.

Also: a diffusers component's config names its own class (`_class_name`); one that is not the
class model_index.json loads it as is another model's (a Chroma transformer in a FLUX.1 folder).
Then each component's weights against its own config (basemodels/weight_shapes.py: a few
tensors' shapes from the safetensors headers, never the data).
transformers configs (`architectures`) are not compared: real repos differ there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lorastudio.basemodels.jsonfile import read_json
from lorastudio.basemodels.layout import listed_components, needs_weights
from lorastudio.basemodels.weight_shapes import weight_disagreements
from lorastudio.families.config_rules import Agrees, ConfigRule, Required, Value

_MISSING = object()


class _Configs:
    """The components' parsed config.json files, read once each ({} when absent or unreadable:
    component_missing reports those)."""

    def __init__(self, folder: Path, listed: Mapping[str, str]) -> None:
        self.folder, self.listed = folder, listed
        self._read: dict[str, dict[str, Any]] = {}

    def config(self, component: str) -> dict[str, Any]:
        if component not in self._read:
            meta: Any = {}
            if component in self.listed:
                try:
                    meta = read_json(self.folder / component / "config.json")
                except (OSError, ValueError):
                    meta = {}
            self._read[component] = meta if isinstance(meta, dict) else {}
        return self._read[component]

    def value(self, ref: Value) -> tuple[str, Any]:
        """(the key found, its value); (ref.key, _MISSING) when none of ref.keys is set."""
        for key in ref.keys:
            node: Any = self.config(ref.component)
            for part in key.split("."):
                node = node.get(part, _MISSING) if isinstance(node, dict) else _MISSING
            if node is not _MISSING and node is not None:
                return key, node
        return ref.key, _MISSING


def _number(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _check_agrees(rule: Agrees, configs: _Configs, title: str) -> tuple[str, str] | None:
    """(blamed component, message) when `rule` fails; None when it holds or cannot be judged."""
    parts = [p for p in rule.parts if p.component in configs.listed]
    found = [(p, *configs.value(p)) for p in parts]
    for part, key, value in found:
        config = configs.config(part.component)
        if value is _MISSING and config and "_class_name" not in config:
            # a transformers config writes every field of its class: one without the key is
            # another class's (a diffusers config may predate a key: its default applies)
            return part.component, (
                f"{part.component}/config.json sets no {key}, which {title} reads: "
                f"this {rule.what} is another model's"
            )
    values = [_number(v) for _, _, v in found]
    if not found or any(v is None for v in values):
        return None
    total = sum(v for v in values if v is not None)
    shown = " + ".join(f"{p.component}/config.json {k} {v}" for p, k, v in found)
    if len(found) == 1:
        shown = f"{found[0][0].component}/config.json: {found[0][1]} {found[0][2]}"
    else:
        shown += f" = {total}"
    blamed = found[0][0].component
    this = f"this {rule.what} is" if len(found) == 1 else f"one of these {rule.what}s is"
    if isinstance(rule.target, int):
        if total * rule.factor == rule.target:
            return None
        return (
            blamed,
            f"{shown}, {title}'s {rule.what} takes {rule.target} ({rule.how}): {this} another model's",
        )
    if rule.target.component not in configs.listed:
        return None
    key, raw = configs.value(rule.target)
    target = _number(raw)
    if target is None or total * rule.factor == target:
        return None
    comp = rule.target.component
    if target % rule.factor:
        why = f"{key} {target} is no multiple of {rule.how}"
        return blamed, f"{shown}, {title}'s {comp} takes none ({why}): {this} another model's"
    wanted = target // rule.factor
    spelled = f"{key} {target} = {wanted} x {rule.how}" if rule.factor > 1 else key
    return blamed, f"{shown}, {title}'s {comp} takes {wanted} ({spelled}): {this} another model's"


def _check_required(rule: Required, configs: _Configs, title: str) -> tuple[str, str] | None:
    comp = rule.value.component
    if comp not in configs.listed or not configs.config(comp):
        return None
    _, value = configs.value(rule.value)
    if value is not _MISSING:
        return None
    return comp, (
        f"{comp}/config.json sets no {rule.value.key}, which {title} needs ({rule.why}): "
        f"this {rule.what} is another model's"
    )


def _class_problems(configs: _Configs) -> list[tuple[str, str]]:
    """A diffusers component whose config names another class than model_index.json loads."""
    found = []
    for comp, class_name in configs.listed.items():
        if not needs_weights(class_name):
            continue
        own = configs.config(comp).get("_class_name")
        if isinstance(own, str) and own and own != class_name:
            found.append(
                (
                    comp,
                    f"{comp}/config.json is a {own}'s config, but model_index.json loads {comp} as "
                    f"{class_name}: this {comp} is another model's",
                )
            )
    return found


def config_disagreements(
    folder: Path, index: Mapping[str, Any], title: str, rules: Sequence[ConfigRule]
) -> list[str]:
    """What the components of pipeline folder `folder` (its parsed model_index.json `index`)
    disagree on, one message per component at most, each naming its config.json, the fact and
    what the family's other component takes; [] when they agree (or nothing can be judged: a
    missing config is component_missing's to report). `title` is the family's ("FLUX.1"),
    `rules` its FamilySpec.config_rules. Reads config.json files, then the safetensors headers
    the rules' `Shape`s name (basemodels/weight_shapes.py: headers only, cached per file
    version; a folder without weights, a fetch's configs, has none read); never raises."""
    configs = _Configs(Path(folder), listed_components(index))
    blamed: dict[str, str] = dict(_class_problems(configs))
    for rule in rules:
        if isinstance(rule, Required):
            result = _check_required(rule, configs, title)
        elif isinstance(rule, Agrees):
            target = rule.target
            if not isinstance(target, int) and target.component in blamed:
                continue  # measured against a component already found foreign
            result = _check_agrees(rule, configs, title)
        else:
            continue  # a Shape: the weights against their own config, below
        if result is not None and result[0] not in blamed:
            blamed[result[0]] = result[1]
    # each component's safetensors headers against its own config.json (a config over another
    # model's weights), the components already found foreign left out
    return [*blamed.values(), *weight_disagreements(Path(folder), index, rules, skip=tuple(blamed))]
