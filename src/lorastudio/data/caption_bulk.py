"""Bulk caption edit over one dataset (issue 29 part 3; no torch, no HTTP): find / replace,
prepend and append over every caption the dataset has (the `.txt` sidecars, and the
metadata.jsonl rows of images without one or with a blank one: captions.own_caption), in that
order.

`find` is plain text (every occurrence replaced; no regular expressions). Only captions that
exist are edited (an image without one keeps none). All or nothing: every new caption is
checked first (an edit that would leave a caption empty, over MAX_CAPTION_BYTES or holding a
NUL, captions.caption_problem: what a scan refuses, refuses the whole edit, naming the files); then
every changed .txt and metadata.jsonl (rewritten once, keeping every other field and line of it)
is staged, and renamed into place only once all are written: a write that fails changes nothing.
The dataset's lock (data.writes.dataset_lock) is held meanwhile, so uploads and other edits wait.
A kohya layout read in place edits its folders' caption files as a run of them reads them
(`_kohya_edit`, RELIABILITY 2201).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lorastudio.data.captions import caption_problem, own_caption, read_metadata, read_sidecar
from lorastudio.data.discovery import METADATA_FILE, discover
from lorastudio.data.kohya_listing import KohyaLayout, kohya_caption_text, kohya_files, kohya_layout
from lorastudio.data.metadata_write import metadata_with_captions
from lorastudio.data.row_names import match_rows
from lorastudio.data.writes import dataset_lock, journaled_renames, staging_name
from lorastudio.errors import ConfigError, DatasetError, FieldProblem, writing
from lorastudio.text_rules import visible_text

EXAMPLES = 5  # (file, before, after) rows returned


@dataclass(frozen=True)
class CaptionEdit:
    """What to do to every caption: replace `find` by `replace` (when find is not empty), then
    put `prepend` in front and `append` at the end (texts taken literally, spaces included)."""

    find: str = ""
    replace: str = ""
    prepend: str = ""
    append: str = ""

    def problems(self) -> list[FieldProblem]:
        """Why the edit is empty or inconsistent (a replace without find)."""
        if self.replace and not self.find:
            return [FieldProblem("replace", "needs find (the text to replace)")]
        if not (self.find or self.prepend or self.append):
            return [FieldProblem("find", "give find (and replace), prepend or append")]
        problems = []  # the texts written into captions: visible text (find may name any, to remove it)
        for name in ("replace", "prepend", "append"):
            try:
                visible_text(getattr(self, name))
            except ValueError as err:  # RELIABILITY 1033
                problems.append(FieldProblem(name, str(err)))
        return problems

    def apply(self, caption: str) -> str:
        text = caption.replace(self.find, self.replace) if self.find else caption
        return f"{self.prepend}{text}{self.append}".strip()


@dataclass
class BulkResult:
    """`changed`: the images whose caption changed (sorted); `captions`: captions looked at;
    `examples`: up to EXAMPLES (file, before, after); `written`: whether files were written
    (False for a dry run)."""

    changed: list[str] = field(default_factory=list)
    captions: int = 0
    examples: list[tuple[str, str, str]] = field(default_factory=list)
    written: bool = False


def bulk_edit_captions(folder: Path, edit: CaptionEdit, *, dry_run: bool = False) -> BulkResult:
    """Apply `edit` to every caption of the dataset folder `folder` (see the module docstring).

    Returns the BulkResult. Raises ConfigError for an empty edit; DatasetError naming every
    caption the edit would leave empty or make too long (nothing written), or a caption file /
    metadata.jsonl that cannot be read; NoSpaceLeft on a full disk."""
    problems = edit.problems()
    if problems:
        raise ConfigError(problems)
    with dataset_lock(folder.parent, folder.name):
        files = discover(folder)
        if (layout := kohya_layout(folder, files)) is not None:  # its folders' captions (2201)
            return _kohya_edit(folder, layout, edit, dry_run)
        table = read_metadata(files.metadata).captions if files.metadata else {}
        table = match_rows(table, (p.name for p in files.images)).by_file  # as the scan (data/row_names.py)
        result = BulkResult()
        txt: dict[Path, str] = {}
        rows: dict[str, str] = {}
        bad: list[str] = []
        for image in files.images:
            sidecar = files.sidecars.get(image.stem)
            # the caption the run trains: a blank .txt is none, its row trains (own_caption, 2070)
            before = own_caption(
                read_sidecar(sidecar) if sidecar is not None else None, table.get(image.name)
            )
            if not before:
                continue
            after = _edited(result, image.name, before, edit, bad)
            if after is None:
                continue
            if sidecar is not None:
                txt[sidecar] = after
            if sidecar is None or (table.get(image.name) or "").strip():  # a row beside the .txt too:
                rows[image.name] = after  # its old text would be a second caption (RELIABILITY 1735)
        if bad:
            raise DatasetError(f"caption edit refused ({len(bad)} caption(s))", bad)
        if not dry_run and (txt or rows):
            _write(folder, txt, rows, files.metadata)
            result.written = True
    return result


def _kohya_edit(folder: Path, layout: KohyaLayout, edit: CaptionEdit, dry_run: bool) -> BulkResult:
    """bulk_edit_captions of a kohya layout read in place (data/kohya_listing.py; the caller holds
    the lock): each image's caption as a run of its folder reads it (its `.txt` / `.caption`
    files, compared), every one of its caption files written with the new one (they must still
    agree); an image whose files disagree or cannot be read refuses the edit, named (the run
    refuses it too); an image without one keeps none (its folder's words train it). Named
    `<folder>/<name>`, as the dataset's page lists it."""
    result, txt, bad = BulkResult(), {}, []
    for name, _path, _repeats, captions in kohya_files(layout):
        before, problems = kohya_caption_text(captions)
        bad += [f"{name}: {p}" for p in problems]
        if not before:
            continue
        after = _edited(result, name, before, edit, bad)
        if after is None:
            continue
        txt.update(dict.fromkeys(captions, after))
    if bad:
        raise DatasetError(f"caption edit refused ({len(bad)} caption(s))", bad)
    if not dry_run and txt:
        _write(folder, txt, {}, None)
        result.written = True
    return result


def _edited(result: BulkResult, name: str, before: str, edit: CaptionEdit, bad: list[str]) -> str | None:
    """Image `name`'s caption `before` after `edit`, counted in `result` (and kept as an example);
    None where the edit leaves it as it is, or where the new one is what write_caption refuses (a
    scan would refuse the file), then named in `bad`."""
    result.captions += 1
    after = edit.apply(before)
    if after == before:
        return None
    why = "the edit would leave the caption empty" if not after else caption_problem(after)
    if why is not None:
        bad.append(f"{name}: {why}")
        return None
    result.changed.append(name)
    if len(result.examples) < EXAMPLES:
        result.examples.append((name, before, after))
    return after


def _write(folder: Path, txt: dict[Path, str], rows: dict[str, str], metadata: Path | None) -> None:
    """Write every new caption file and metadata.jsonl: all staged first, then all renamed into
    place. A write that fails (a full disk, the file-size limit, a read-only folder) changes
    nothing: the staged files go and the error names the dataset, so the edit can be sent again
    (written file by file, a prepend that failed at the 700th caption was applied twice to the
    first 699 by its retry). A kill -9 while staging leaves only staging names (a server start
    removes them, jobs/leftovers.py); one between two renames leaves their journal, which the
    next holder of the dataset's lock or a server start finishes (data/writes.journaled_renames)."""
    contents = {path: (text + "\n").encode("utf-8") for path, text in txt.items()}
    if rows and metadata is not None:  # line by line as read_metadata reads it, bad lines kept
        contents[metadata] = metadata_with_captions(metadata, rows, append_missing=False)
    staged: dict[Path, Path] = {}
    try:
        with writing(f"the captions of {folder.name} could not be written", folder):
            for path, data in sorted(contents.items()):
                staged[path] = staging_name(path)
                staged[path].write_bytes(data)
            journaled_renames(folder, {tmp: path for path, tmp in staged.items()})
    finally:
        for tmp in staged.values():
            tmp.unlink(missing_ok=True)


__all__ = ["METADATA_FILE", "BulkResult", "CaptionEdit", "bulk_edit_captions"]
