"""The import's report and the config it builds (no torch).

Every setting of the peer's file gets exactly one line: carried (peer key -> our key = value),
changed in meaning (the same, plus how), or not carried (why: not supported here, not needed
here, refused by the strict config, or not read by this importer). `Draft` collects them while a
peer module maps its file; `Draft.unread` names every leaf of the peer's document that no line
covers, so that nothing is ever silently ignored (a key this importer does not know is reported
as "not read", never dropped).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lorastudio.errors import FieldProblem

Outcome = Literal["carried", "changed", "not carried"]
NOT_SUPPORTED = "not supported here"
NOT_NEEDED = "not needed here"
NOT_READ = "not read: this importer does not know this setting (check it by hand)"


@dataclass(frozen=True)
class Line:
    """One peer setting's fate: `peer` its key (dotted, list items as [i]), `ours` the lorastudio
    setting it became (dotted) or None, `value` what was written, `note` how the meaning changed
    or why it was not carried."""

    peer: str
    outcome: Outcome
    ours: str | None = None
    value: Any = None
    note: str = ""

    def text(self) -> str:
        """The line as the CLI prints it."""
        if self.outcome == "not carried":
            return f"not carried  {self.peer}: {self.note}"
        where = f"{self.peer} -> {self.ours} = {_shown(self.value)}"
        return f"carried      {where}" if self.outcome == "carried" else f"changed      {where}: {self.note}"

    def as_json(self) -> dict[str, Any]:
        """The line as the API and `--json` give it."""
        return {
            "peer": self.peer,
            "outcome": self.outcome,
            "ours": self.ours,
            "value": self.value,
            "note": self.note,
        }


def _shown(value: Any) -> str:
    """A value as TOML-ish text (strings quoted), cut at 120 characters."""
    import json

    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


@dataclass
class Draft:
    """The lorastudio settings a peer's file maps to, and the report's lines so far.

    `settings` is the config (top-level keys; `datasets` a list of entry dicts); `origin` maps
    each setting written (dotted: "learning_rate", "datasets.0.repeats") to the indices of its
    report lines, so a setting the strict config refuses is taken out and its line turned into a
    "not carried" one (settle.py). `problems` are the file's own faults (a path with '..', a
    value of the wrong type) that refuse the import, each naming the file and key."""

    file: Path
    kind: str
    local: bool = True  # the file is on this machine: the files it names are read, its relative paths placed
    settings: dict[str, Any] = field(default_factory=dict)
    lines: list[Line] = field(default_factory=list)
    origin: dict[str, list[int]] = field(default_factory=dict)
    problems: list[FieldProblem] = field(default_factory=list)
    sides: set[str] = field(default_factory=set)  # the roots of the side files read (unread's)
    nulls: list[str] = field(default_factory=list)  # settings carried as null (off), left out of a .toml

    def set(
        self, peer: str, ours: str, value: Any, how: str = "", shown: tuple[str, Any] | None = None
    ) -> None:
        """Write `value` as our setting `ours` (dotted for an entry's: "datasets.0.path") and
        report it: carried, or changed when `how` says how its meaning differs; `shown` the
        (key, value) the line shows instead (a list's first item: "sample_prompts[0]")."""
        _put(self.settings, ours, value)
        label, seen = shown or (ours, value)
        self.lines.append(Line(peer, "changed" if how else "carried", label, seen, how))
        self.origin[ours] = [len(self.lines) - 1]

    def fold(self, peer: str, ours: str, value: Any, how: str = "", label: str | None = None) -> None:
        """Report `peer` as carried into our setting `ours`, written by an earlier `set` (each
        sample prompt's width, from the peer's one width; `label`: the part shown): taken out
        with it."""
        self.lines.append(Line(peer, "changed" if how else "carried", label or ours, value, how))
        self.origin.setdefault(ours, []).append(len(self.lines) - 1)

    def amend(self, ours: str, value: Any, how: str) -> None:
        """Write `value` for our setting `ours` instead of the one carried, its lines now "changed",
        saying `how`."""
        _put(self.settings, ours, value)
        for index in self.origin.get(ours, []):
            line = self.lines[index]
            self.lines[index] = Line(
                line.peer, "changed", line.ours, value, "; ".join(n for n in (line.note, how) if n)
            )

    def drop(self, peer: str, why: str) -> None:
        """Report `peer` as not carried, for the reason `why`."""
        self.lines.append(Line(peer, "not carried", note=why))

    def fail(self, peer: str, why: str) -> None:
        """A fault of the file at `peer` that refuses the import (named with the file)."""
        self.problems.append(FieldProblem(f"{self.file.name}: {peer}", why))

    def refuse(self, ours: str, why: str, verb: str = "refused here", keep: bool = False) -> bool:
        """Take our setting `ours` (or, for an entry's key, that key) out of the config because
        the strict config refuses it for `why` (`verb`: what befell it, "refused here"); its
        report line becomes "not carried" (`keep`: its note, how the value was chosen, kept after
        the reason). Returns whether `ours` was one this import wrote."""
        indices = self.origin.pop(ours, None)
        if indices is None:
            return False
        _remove(self.settings, ours)
        for index in indices:
            line = self.lines[index]
            note = f"{verb} ({ours} = {_shown(line.value)}: {why})"
            self.lines[index] = Line(
                line.peer, "not carried", note=note + (f"; {line.note}" if keep and line.note else "")
            )
        return True

    def unread(self, data: Any, root: str = "") -> None:
        """Report every leaf of `data` (the peer's document; with `root`, a side file it names,
        its keys reported under `root`: "lycoris_config.json.algo") that no line names (itself, a
        part that holds it, or a part of it: optimizer_args' items) as not read. A side file's
        leaves are matched against its own lines only, the document's against its own: the peer
        key "lycoris_config" is no part holding "lycoris_config.json.algo", though the text reads
        so. The match sorts once (`_unnamed`): a file of 100 000 keys is checked in a blink."""
        if root:
            self.sides.add(root)
            named = [n for n in {line.peer for line in self.lines} if _within(n, root)]
        else:
            named = [
                n for n in {line.peer for line in self.lines} if not any(_within(n, s) for s in self.sides)
            ]
        for leaf in _unnamed(leaves(data, root), named):
            self.drop(leaf, NOT_READ)

    def report(self) -> list[Line]:
        """The lines, in the peer file's order of mapping."""
        return list(self.lines)


def _within(key: str, part: str) -> bool:
    """Whether `key` is `part` or a key inside it."""
    return key == part or key.startswith((part + ".", part + "["))


def _unnamed(found: list[str], named: list[str]) -> list[str]:
    """The keys of `found` (in order) that are no key of `named`, inside none and hold none
    (`_within` either way). Sorted keys put every key inside `n` in one run (those starting
    `n + "."` sort before `n + "/"`, `n + "["` before `n + "\\"`), so each key is looked up by
    bisection instead of against every name (a file of many keys and many lines was quadratic:
    minutes)."""
    keys = sorted(set(found))
    names = sorted(set(named))
    covered = [0] * (len(keys) + 1)  # a difference array of the runs of keys inside a name
    for n in names:
        for start, stop in ((n, n + "\0"), (n + ".", n + "/"), (n + "[", n + "\\")):
            lo, hi = bisect.bisect_left(keys, start), bisect.bisect_left(keys, stop)
            covered[lo] += 1
            covered[hi] -= 1
    inside, total = set(), 0
    for i, key in enumerate(keys):
        total += covered[i]
        if total:
            inside.add(key)
    for key in keys:  # a key that holds a name (optimizer_args whose items have lines)
        for prefix in (key + ".", key + "["):
            i = bisect.bisect_left(names, prefix)
            if i < len(names) and names[i].startswith(prefix):
                inside.add(key)
    return [key for key in found if key not in inside]


def leaves(data: Any, root: str = "") -> list[str]:
    """The dotted key of every leaf of `data` (a scalar, an empty list or table); a list of scalars
    is one leaf (prompts, resolutions)."""
    if isinstance(data, dict) and data:
        out: list[str] = []
        for key, value in data.items():
            out += leaves(value, f"{root}.{key}" if root else str(key))
        return out
    if isinstance(data, list) and any(isinstance(v, dict | list) for v in data):
        out = []
        for i, value in enumerate(data):
            out += leaves(value, f"{root}[{i}]")
        return out
    return [root] if root else []


def _put(settings: dict[str, Any], ours: str, value: Any) -> None:
    """Set `ours` ("key" or "datasets.N.key") in `settings`."""
    head, _, rest = ours.partition(".")
    if not rest:
        settings[head] = value
        return
    index, _, key = rest.partition(".")  # datasets.N.key
    entries = settings.setdefault(head, [])
    while len(entries) <= int(index):
        entries.append({})
    entries[int(index)][key] = value


def _remove(settings: dict[str, Any], ours: str) -> None:
    """Remove `ours` ("key" or "datasets.N.key") from `settings`."""
    head, _, rest = ours.partition(".")
    if not rest:
        settings.pop(head, None)
        return
    index, _, key = rest.partition(".")
    entries = settings.get(head)
    if isinstance(entries, list) and int(index) < len(entries):
        entries[int(index)].pop(key, None)
