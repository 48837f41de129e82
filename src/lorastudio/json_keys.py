"""JSON read with every object key given once: a key given twice is refused, never "the last
wins" (Python's json keeps the last value silently; TOML refuses the repeat). Shared by the CLI's
config files (cli/config_file.py), its `--set` values and every JSON body the API reads
(api/body_checks.py). No HTTP, no torch."""

from __future__ import annotations

import json
from typing import Any

Location = tuple[str | int, ...]  # keys and list indices from the document's root to a key


class DuplicateKeys(ValueError):
    """A JSON document with one or more object keys given twice. `locations`: each repeated key's
    path from the root (its last element is the key), in document order, each once."""

    def __init__(self, locations: list[Location]):
        self.locations = locations
        super().__init__("; ".join(f"{repeated_key(loc)} (at {dotted(loc)})" for loc in locations))


def repeated_key(location: Location) -> str:
    """The message of one repeated key (the last element of its location)."""
    return f"the key {location[-1]!r} is given twice in one object"


def dotted(location: Location) -> str:
    """`("datasets", 0, "path")` -> "datasets.0.path" (the dotted field paths of ConfigError)."""
    return ".".join(str(part) for part in location)


def loads_unique(text: str | bytes) -> Any:
    """`json.loads(text)`, refusing a key given twice in any object, however deep (in a list too).
    Raises DuplicateKeys naming every repeated key's location, json.JSONDecodeError for bad
    JSON, UnicodeDecodeError for bytes that are not UTF-8/16/32, RecursionError for nesting
    deeper than the parser's limit."""
    repeated: list[tuple[dict[str, Any], list[str]]] = []  # keeps each such object alive: ids stay unique

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        again: list[str] = []
        for key, value in pairs:
            if key in out and key not in again:
                again.append(key)
            out[key] = value
        if again:
            repeated.append((out, again))
        return out

    data = json.loads(text, object_pairs_hook=pairs_hook)
    if repeated:
        raise DuplicateKeys(_locations(data, {id(obj): keys for obj, keys in repeated}))
    return data


def _locations(data: Any, repeated: dict[int, list[str]]) -> list[Location]:
    """The location of every repeated key of an object still in `data` (an object dropped as the
    earlier value of a repeated key is not: the repeat above it is named), an object's own
    before those of the objects it holds, siblings in document order.
    Iterative: a document nested as deep as the parser allows does not overflow the stack here."""
    found: list[Location] = []
    stack: list[tuple[Any, Location]] = [(data, ())]
    while stack:
        value, where = stack.pop()
        if isinstance(value, dict):
            found += [(*where, key) for key in repeated.get(id(value), [])]
            children = [(v, (*where, k)) for k, v in value.items()]
        elif isinstance(value, list):
            children = [(v, (*where, i)) for i, v in enumerate(value)]
        else:
            continue
        stack += reversed(children)  # the first child is taken next: document order
    return found
