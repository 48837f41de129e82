"""Do a pipeline folder's weights match their own config.json? Checked from the safetensors
headers only (the 8-byte length and the JSON header, bounded; never the tensor data) against
the family's declared tensor shapes (FamilySpec.config_rules' `Shape` rules,
families/config_rules.py), so a config.json over another model's weights (a VAE with other
latent channels, a text encoder of another vocabulary, a transformer of another width) is
refused before any load, naming the file, the tensor, its shape and the expected one.

basemodels/agreement.py checks that the configs agree with each other; this checks that each
component's weights agree with its config: together, that the weights agree with the family.
Headers are cached per file version (file_version.version_of), so a catalogue relisting reads
none again. Only `.safetensors` weights are read (a `.bin` is a pickle: not judged); a sharded
component's weight index (`*.safetensors.index.json`) says which shard holds a tensor. No torch.
"""

from __future__ import annotations

import contextlib
import os
import stat
import struct
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lorastudio import json_read
from lorastudio.basemodels.jsonfile import read_json
from lorastudio.basemodels.layout import is_variant, listed_components, loadable_weights, needs_weights
from lorastudio.families.config_rules import ConfigRule, Factor, Shape
from lorastudio.file_version import FileVersion, version_of

MAX_HEADER_BYTES = 64 * 1024 * 1024  # a 30 B model's shard header is a few MB
_PACKED = frozenset({"U8", "I8", "U4", "I4"})  # pre-quantised weights store packed shapes
CACHE_ENTRIES = 8192

# (path, file version, suffixes) -> {tensor name: shape} of the tensors matching a suffix;
# None when the header cannot be read
_cache: OrderedDict[tuple[str, FileVersion, tuple[str, ...]], dict[str, list[int] | None] | None] = (
    OrderedDict()
)
_lock = threading.Lock()


def _matches(name: str, suffix: str) -> bool:
    return name == suffix or name.endswith("." + suffix)


def _read_header(fd: int, size: int) -> dict[str, Any] | None:
    raw = os.read(fd, 8)
    if len(raw) != 8:
        return None
    (length,) = struct.unpack("<Q", raw)
    if length > min(MAX_HEADER_BYTES, size - 8):
        return None
    chunks, total = [], 0
    while total < length:
        chunk = os.read(fd, min(1 << 20, length - total))
        if not chunk:
            return None
        chunks.append(chunk)
        total += len(chunk)
    try:
        header = json_read.loads(b"".join(chunks))
    except ValueError:  # bad JSON, too deeply nested included
        return None
    return header if isinstance(header, dict) else None


def header_shapes(file: Path, suffixes: tuple[str, ...]) -> dict[str, list[int] | None] | None:
    """{tensor name: shape} of the tensors of safetensors `file` whose name matches one of
    `suffixes` (shape None for a packed pre-quantised dtype: there, not judged); None when the file is no readable
    safetensors file (not a regular file, a header over MAX_HEADER_BYTES or past the file's end,
    not JSON). Reads the header only, once per file version."""
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        key = (str(file), version_of(info), suffixes)
        with _lock:
            if key in _cache:
                _cache.move_to_end(key)
                return _cache[key]
        try:
            header = _read_header(fd, info.st_size)
        except OSError:
            header = None
    finally:
        os.close(fd)
    found: dict[str, list[int] | None] | None = None
    if header is not None:
        found = {}
        for name, meta in header.items():
            if name == "__metadata__" or not isinstance(meta, dict):
                continue
            shape = meta.get("shape")
            if isinstance(shape, list) and any(_matches(name, s) for s in suffixes):
                packed = meta.get("dtype") in _PACKED
                found[name] = None if packed else [d for d in shape if isinstance(d, int)]
    with _lock:
        _cache[key] = found
        while len(_cache) > CACHE_ENTRIES:
            _cache.popitem(last=False)
    return found


def weight_files(folder: Path) -> list[str]:
    """The .safetensors files a loader reads in component `folder`: the shards its non-variant
    weight index names, else the non-variant .safetensors files ([] when none, or when a shard
    the index names is not there: a tensor could be in it)."""
    try:
        names = {p.name for p in folder.iterdir() if p.is_file()}
    except OSError:
        return []
    files, suffix = loadable_weights(names)
    if suffix != ".safetensors":
        return []
    for index in sorted(
        n for n in names if n.endswith(".safetensors.index.json") and not is_variant(n[:-11])
    ):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            weight_map = read_json(folder / index).get("weight_map", {})
            shards = sorted({v for v in weight_map.values() if isinstance(v, str)})
            if shards:  # a shard not there yet (a partial hub snapshot): the loader's to judge
                return shards if names.issuperset(shards) else []
    return files


def _factor(config: Mapping[str, Any], factor: Factor) -> tuple[str, int] | None:
    """(how the factor reads, its value); None when none of its keys is set to a whole number."""
    if isinstance(factor, int):
        return str(factor), factor
    for key in factor:
        node: Any = config
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, int) and not isinstance(node, bool):
            return f"{key} {node}", node
    return None


def _expected(config: Mapping[str, Any], rule: Shape) -> tuple[list[int | None], str] | None:
    """The expected leading dims (None: any) and how they read ("2 x latent_channels 16, *");
    None when the config does not set a key they need."""
    dims: list[int | None] = []
    words: list[str] = []
    for dim in rule.dims:
        if dim is None:
            dims.append(None)
            words.append("*")
            continue
        product, named = 1, []
        for factor in dim:
            got = _factor(config, factor)
            if got is None:
                return None
            named.append(got[0])
            product *= got[1]
        dims.append(product)
        words.append(" x ".join(named))
    return dims, ", ".join(words)


def _check(folder: Path, comp: str, config: Mapping[str, Any], rules: Sequence[Shape]) -> str | None:
    """The first disagreement of component `comp`'s weights with its rules; None when none."""
    files = weight_files(folder / comp)
    if not files:
        return None
    # one read per file for every rule of the component (one cache entry per file version)
    suffixes = tuple(dict.fromkeys(t for rule in rules for t in rule.tensors))
    headers = [(f, header_shapes(folder / comp / f, suffixes)) for f in files]
    if any(h is None for _, h in headers):
        return None  # an unreadable file is the loader's to report
    for rule in rules:
        expected = _expected(config, rule)
        if expected is None:
            continue
        dims, how = expected
        for suffix in rule.tensors:
            hits = [(f, n, s) for f, h in headers for n, s in (h or {}).items() if _matches(n, suffix)]
            if hits:
                break
        else:
            shown = " / ".join(rule.tensors)
            return (
                f"{comp}/{', '.join(files[:3])}: no {shown} tensor, which {comp}/config.json's "
                f"{rule.what} has: these weights are another model's"
            )
        for file, name, shape in hits:
            if shape is None:
                continue  # packed (pre-quantised): its stored shape is not the model's
            if len(shape) < len(dims) or any(
                d is not None and d != s for d, s in zip(dims, shape, strict=False)
            ):
                want = ", ".join("*" if d is None else str(d) for d in dims)
                return (
                    f"{comp}/{file}: {name} is {shape}, {comp}/config.json makes it [{want}, ...] "
                    f"({how}): these {rule.what} weights are another model's"
                )
    return None


def weight_disagreements(
    folder: Path, index: Mapping[str, Any], rules: Sequence[ConfigRule], skip: Sequence[str] = ()
) -> list[str]:
    """One message per component of pipeline folder `folder` (its parsed model_index.json
    `index`) whose safetensors weights disagree with its config.json on a `Shape` rule of
    `rules`, naming the file, the tensor, its shape and the expected one; [] when they agree or
    nothing can be judged (no config, no .safetensors weights, an unreadable header: the
    loader's or component_missing's to report; a config with a `quantization_config`, whose
    weights are packed). Components in `skip` (already found foreign) are not read. Never raises."""
    listed = listed_components(index)
    by_comp: dict[str, list[Shape]] = {}
    for rule in rules:
        comp = rule.component if isinstance(rule, Shape) else None
        if comp in listed and comp not in skip and needs_weights(listed[comp]):
            by_comp.setdefault(rule.component, []).append(rule)
    found = []
    for comp, comp_rules in by_comp.items():
        try:
            config = read_json(Path(folder) / comp / "config.json")
        except (OSError, ValueError):
            continue
        if not isinstance(config, dict) or "quantization_config" in config:
            continue
        message = _check(Path(folder), comp, config, comp_rules)
        if message:
            found.append(message)
    return found
