"""A seeded generator of TrainConfig documents read off the pydantic schema itself (the fuzz audit of
session 28, tests/unit/test_config_fuzz.py and tests/unit/training/test_config_fuzz_train.py).

Each document is a tiny-model run of one family (base_model, data_dir, a small resolution, 2 steps)
with a few settings drawn from the schema: every field's type, Literal choices and bounds (pydantic's
Ge / Gt / Le / Lt / MinLen / MaxLen metadata), the nested models (datasets entries, preservation,
sample prompts) by the same rules, weighted towards the features added since session 21 (adapters,
optimizers, EMA, validation hold-outs, disk caches, several datasets, block swap, fused projections,
micro-batches, samples, trackers, masks, edit controls). Some documents also carry deliberately wrong
values (a wrong type, out of range, null where none is taken, an unknown key, a huge string or
number, NaN / inf, an empty list), each recorded by its field path in `Doc.wrong`: a check must name
every one of them.

`sized=True` keeps the valid values small enough to train on CPU in seconds (a sample of the
accepted documents is trained for 2 steps); `sized=False` draws over each field's whole range,
its bounds included (check-only).
"""

from __future__ import annotations

import math
import random
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel

from config_fuzz_tables import COMPANIONS, FEATURES, MISSING, SMALL, hand_values
from lorastudio import families
from lorastudio.config import FAMILY_SPECIFIC_FIELDS, TrainConfig
from lorastudio.config_datasets import DatasetEntry
from lorastudio.config_preservation import Preservation
from lorastudio.config_samples import SamplePrompt


@dataclass
class Doc:
    """One generated document: `data` (JSON-able but for NaN / inf), its family, and the field
    paths given deliberately wrong values (each must be named by a refusal)."""

    seed: int
    family: str
    data: dict[str, Any]
    wrong: set[str] = field(default_factory=set)

    def label(self) -> str:
        return f"doc {self.seed} ({self.family}; wrong: {sorted(self.wrong) or '-'})"


def _bounds(metadata: list[Any]) -> tuple[float | None, bool, float | None, bool]:
    """(low, low inclusive, high, high inclusive) of pydantic's annotated_types metadata."""
    lo = hi = None
    lo_in = hi_in = True
    for m in metadata:
        if isinstance(m, at.Ge):
            lo, lo_in = m.ge, True
        elif isinstance(m, at.Gt):
            lo, lo_in = m.gt, False
        elif isinstance(m, at.Le):
            hi, hi_in = m.le, True
        elif isinstance(m, at.Lt):
            hi, hi_in = m.lt, False
    return lo, lo_in, hi, hi_in


def _lengths(metadata: list[Any]) -> tuple[int, int | None]:
    lo, hi = 0, None
    for m in metadata:
        if isinstance(m, at.MinLen):
            lo = m.min_length
        elif isinstance(m, at.MaxLen):
            hi = m.max_length
    return lo, hi


def _members(annotation: Any) -> list[Any]:
    """A union's members (None left out), or [annotation]."""
    if get_origin(annotation) in (Union, types.UnionType):
        return [_plain(a) for a in get_args(annotation) if a is not type(None)]
    return [_plain(annotation)]


def _plain(annotation: Any) -> Any:
    """Annotated[str, validator] -> str (an Annotated int with bounds of its own is kept)."""
    if getattr(annotation, "__metadata__", None) and get_args(annotation)[0] is str:
        return str
    return annotation


def _nullable(annotation: Any) -> bool:
    return get_origin(annotation) in (Union, types.UnionType) and type(None) in get_args(annotation)


def _inner_metadata(annotation: Any) -> list[Any]:
    """Metadata of an Annotated member (control_resolution's int bounds)."""
    meta = getattr(annotation, "__metadata__", ())
    out: list[Any] = []
    for m in meta:
        out += list(getattr(m, "metadata", [])) or [m]
    return out


class Generator:
    """Draws documents from the schema with one random.Random (reproducible for a seed)."""

    def __init__(self, seed: int, *, sized: bool, hand: dict[str, list[Any]]) -> None:
        self.rng = random.Random(seed)
        self.sized = sized
        self.hand = hand  # the hand-drawn values (config_fuzz_tables.hand_values), nested models' too

    # --- valid values -----------------------------------------------------------------
    def number(self, name: str, kind: type, metadata: list[Any]) -> float | int:
        rng = self.rng
        if self.sized and name in SMALL:
            lo_s, hi_s = SMALL[name]
            return rng.randint(int(lo_s), int(hi_s)) if kind is int else round(rng.uniform(lo_s, hi_s), 4)
        lo, lo_in, hi, hi_in = _bounds(metadata)
        if kind is int:
            low = int(lo if lo is not None else 0) + (0 if lo_in else 1)
            high = int(hi) - (0 if hi_in else 1) if hi is not None else low + 1000
            if self.sized:
                high = min(high, low + 4)
            pick = rng.random()
            if not self.sized and pick < 0.2:
                return low
            if not self.sized and pick < 0.4:
                return high
            return rng.randint(low, high)
        low_f = float(lo) if lo is not None else 0.0
        high_f = float(hi) if hi is not None else low_f + 10.0
        pick = rng.random()
        if not self.sized and pick < 0.15 and lo_in and lo is not None:
            return low_f
        if not self.sized and pick < 0.3 and hi_in and hi is not None:
            return high_f
        value = rng.uniform(low_f, high_f)
        if value == low_f and not lo_in or value == high_f and not hi_in:
            value = (low_f + high_f) / 2
        if self.sized and high_f - low_f > 1:  # e.g. snr_gamma, huber_c, flow_shift
            value = low_f + (high_f - low_f) * rng.random() ** 3
            value = value if value > low_f or lo_in else (low_f + high_f) / 2
        return round(value, 6) if round(value, 6) != low_f or lo_in else value

    def value(self, name: str, annotation: Any, metadata: list[Any], hand: dict[str, list[Any]]) -> Any:
        """A valid value of a field (MISSING: leave it out)."""
        rng = self.rng
        if name in hand:
            return rng.choice(hand[name])
        if _nullable(annotation) and rng.random() < 0.1:
            return None
        member = rng.choice(_members(annotation))
        origin = get_origin(member)
        if origin is Literal:
            return rng.choice([a for a in get_args(member)])
        if getattr(member, "__metadata__", None):  # Annotated: its base type and its own bounds
            return self.number(name, get_args(member)[0], _inner_metadata(member))
        if member is bool:
            return rng.random() < 0.5
        if member in (int, float):
            return self.number(name, member, metadata)
        if member is str:
            return "a fuzzed value"
        if isinstance(member, type) and issubclass(member, BaseModel):
            return self.model(member, hand)
        if origin is list:
            (item,) = get_args(member)
            if get_origin(item) in (Union, types.UnionType) or get_origin(item) is Literal:
                return [self.value(name, item, [], {}) for _ in range(rng.randint(1, 2))]
            if isinstance(item, type) and issubclass(item, BaseModel):
                return [self.model(item, hand) for _ in range(rng.randint(1, 2))]
            return [self.value(name, item, metadata, {}) for _ in range(rng.randint(1, 2))]
        return MISSING

    def model(self, model: type[BaseModel], _: dict[str, list[Any]]) -> dict[str, Any]:
        """A valid object of a nested model: its required fields and a few optional ones."""
        rng, hand = self.rng, self.hand
        out: dict[str, Any] = {}
        fixed = {
            DatasetEntry: {"path": hand["data_dir"][0]},
            Preservation: {"class_word": rng.choice(["person", "shape"])},
            SamplePrompt: {"prompt": rng.choice(["a red square", "sks, a circle"])},
        }[model]
        out.update(fixed)
        optional = [n for n in model.model_fields if n not in fixed]
        for name in rng.sample(optional, rng.randint(0, min(3, len(optional)))):
            info = model.model_fields[name]
            if model is SamplePrompt and name in ("controls",):
                continue
            if model is Preservation and name == "prompts":
                out[name] = ["a photo of a person"]
                continue
            if name == "resolution":
                out[name] = rng.choice(hand["resolution"])
                continue
            if name in ("trigger_word", "default_caption"):
                out[name] = rng.choice(hand[name])
                continue
            value = self.value(name, info.annotation, list(info.metadata), {})
            if value is not MISSING:
                out[name] = value
        return out

    # --- wrong values -----------------------------------------------------------------
    def wrong(self, name: str, annotation: Any, metadata: list[Any]) -> Any:
        """A value the field must refuse (MISSING when none of the kinds applies)."""
        rng = self.rng
        members = _members(annotation)
        kinds = ["type", "dict"]
        lo, _, hi, _ = _bounds(metadata)
        numeric = any(m in (int, float) for m in members)
        if numeric and (lo is not None or hi is not None):
            kinds += ["range", "huge"]  # huge: past the bound there is (an unbounded side takes any size)
        if float in members:
            kinds += ["nan"]
        if not _nullable(annotation) and TrainConfig.model_fields.get(name) is not None:
            kinds += ["null"]
        _, max_len = _lengths(metadata)
        if str in members and max_len is not None:
            kinds += ["long"]
        if any(get_origin(m) is list for m in members):
            min_len, _ = _lengths(metadata)
            if min_len >= 1:
                kinds += ["empty"]
        if any(get_origin(m) is Literal for m in members):
            kinds += ["choice"]
        kind = rng.choice(kinds)
        if kind == "type":
            if str in members or any(get_origin(m) is Literal for m in members):
                return rng.choice([12345, [1, 2]])
            return rng.choice(["not-a-value", [1, 2]] if numeric else ["maybe", 7.5])
        if kind == "dict":  # a mapping field (rank_pattern) takes a mapping: not of text, though
            return {"x": "not-a-number"} if any(get_origin(m) is dict for m in members) else {"x": 1}
        if kind == "range":
            if lo is not None and (hi is None or rng.random() < 0.5):
                return (int(lo) - 1) if int in members else float(lo) - 0.5
            return (int(hi) + 1) if int in members else float(hi) + 0.5
        if kind == "huge":
            big = rng.choice([10**30, 2**63]) if int in members else 1e308
            return big if hi is not None and (lo is None or rng.random() < 0.5) else -big
        if kind == "nan":
            return rng.choice([math.nan, math.inf, -math.inf])
        if kind == "null":
            return None
        if kind == "long":
            return "x" * (max_len + 1 + rng.choice([0, 100_000]))
        if kind == "empty":
            return []
        if kind == "choice":
            return "not-a-choice"
        return MISSING


def generate(
    seed: int,
    family: str,
    base_model: str,
    dataset: str,
    *,
    sized: bool,
    wrong: bool,
    extra: int = 5,
    coherent: bool = False,
    exclude: frozenset[str] = frozenset(),
) -> Doc:
    """One document of `family` on `base_model` / `dataset` (data_dir; a datasets entry's path),
    with `extra` settings drawn from the schema (two thirds of them features), and with `wrong`
    1-3 wrong values (recorded in Doc.wrong) and maybe an unknown key; `coherent` adds each drawn
    setting's companions (COMPANIONS) and leaves out the family-specific settings the family refuses,
    so that most such documents are accepted. `exclude`: settings never drawn (valid or wrong)."""
    hand = hand_values(dataset, family, seed)
    gen = Generator(seed, sized=sized, hand=hand)
    rng = gen.rng
    spec = families.get(family).spec
    data: dict[str, Any] = {
        "family": family,
        "base_model": base_model,
        "data_dir": dataset,
        "resolution": max(32, 2 * spec.resolution_multiple),
        "steps": 2,
        "learning_rate": 5e-3,
        "lora_rank": 4,
        "seed": 0,
        "output_name": f"fuzz-{seed}",
    }
    if "max_sequence_length" in spec.supports:
        data["max_sequence_length"] = 16
    if spec.control_sizing is not None and (Path(dataset) / "control").is_dir():
        data["control_resolution"] = "target"  # the pipelines' ~1 MP controls dwarf a 32 px target
    fields = [n for n in TrainConfig.model_fields if n not in ("family", "base_model", *exclude)]
    features = [n for n in FEATURES if n not in exclude]
    chosen: list[str] = []
    for _ in range(extra):
        pool = features if rng.random() < 2 / 3 else fields
        chosen.append(rng.choice(pool))
    for name in dict.fromkeys(chosen):
        info = TrainConfig.model_fields[name]
        value = gen.value(name, info.annotation, list(info.metadata), hand)
        if value is MISSING:
            continue
        data[name] = value
        if name == "datasets":
            data.pop("data_dir", None)
    if coherent:  # each drawn setting's companions; family-specific ones the family refuses left out
        for name in [n for n in data if n in COMPANIONS]:
            for key, value in COMPANIONS[name].items():
                data[key] = value if key != name else value
        if data.get("optimizer") == "prodigy":
            data["learning_rate"] = 1.0
        for name in [n for n in data if n in FAMILY_SPECIFIC_FIELDS and n not in spec.supports]:
            del data[name]
        if spec.edit_model:
            data.pop("preservation", None)  # not for an edit family
    doc = Doc(seed, family, data)
    if wrong:
        for name in rng.sample(fields, rng.randint(1, 3)):
            info = TrainConfig.model_fields[name]
            bad = gen.wrong(name, info.annotation, list(info.metadata))
            if bad is MISSING:
                continue
            data[name] = bad
            doc.wrong.add(name)
            if name == "datasets":
                data.pop("data_dir", None)
            elif name == "data_dir":
                data.pop("datasets", None)
        if rng.random() < 0.3:
            key = rng.choice(["lerning_rate", "fuzz_unknown", "stpes", "Lora_Rank"])
            data[key] = 1
            doc.wrong.add(key)
        if rng.random() < 0.2 and isinstance(data.get("datasets"), list) and data["datasets"]:
            data["datasets"][0]["nonsense"] = True
            doc.wrong.add("datasets.0.nonsense")
        _nested_wrong(gen, data, doc)
    return doc


NESTED: dict[str, type[BaseModel]] = {
    "datasets": DatasetEntry,
    "preservation": Preservation,
    "sample_prompts": SamplePrompt,
}


def _nested_wrong(gen: Generator, data: dict[str, Any], doc: Doc) -> None:
    """Maybe one wrong value inside a nested object the document holds (a datasets entry, the
    preservation table, a sample prompt object), recorded by its path (`datasets.1.repeats`)."""
    rng = gen.rng
    spots: list[tuple[str, dict[str, Any], type[BaseModel]]] = []
    for name, model in NESTED.items():
        value = data.get(name)
        if isinstance(value, dict):
            spots.append((name, value, model))
        elif isinstance(value, list):
            spots += [(f"{name}.{i}", v, model) for i, v in enumerate(value) if isinstance(v, dict)]
    if not spots or rng.random() < 0.5:
        return
    path, target, model = rng.choice(spots)
    field_name = rng.choice(list(model.model_fields))
    info = model.model_fields[field_name]
    bad = gen.wrong(field_name, info.annotation, list(info.metadata))
    if bad is not MISSING and not (bad is None and _nullable(info.annotation)):
        target[field_name] = bad
        doc.wrong.add(f"{path}.{field_name}")


def documents(
    seed: int, count: int, model_of: Callable[[str], Any], data: dict[str, str], **kw: Any
) -> list[Doc]:
    """`count` documents from `seed` (document i's own seed: seed x 100003 + i), the family by turn
    (TINY_FAMILIES; `model_of(family)` its base_model folder), 40 % of them with wrong values, the
    rest `sized` 70 % and `coherent` 50 % of the time; `data`: {"plain": a dataset folder, "pairs":
    one with a control/ image each} (the edit families' pairs; FLUX.2's controls are optional: either)."""
    from lorastudio.tiny import TINY_FAMILIES

    out = []
    for i in range(count):
        family = TINY_FAMILIES[i % len(TINY_FAMILIES)]
        spec = families.get(family).spec
        draw = random.Random(seed * 100_003 + i)
        paired = spec.edit_model or spec.control_sizing is not None and draw.random() < 0.5
        wrong = draw.random() < 0.4
        out.append(
            generate(
                seed * 100_003 + i,
                family,
                str(model_of(family)),
                data["pairs"] if paired else data["plain"],
                sized=draw.random() < 0.7,
                wrong=wrong,
                coherent=not wrong and draw.random() < 0.5,
                **kw,
            )
        )
    return out
