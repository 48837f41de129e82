"""Writing a caption job's captions (atomically, no torch); which images get one: captioning/plan.py.

A `.txt` or row that appears while the job runs is kept (CaptionWriter `keep_new`, whichever
store the captions go to; metadata.jsonl re-read only when it changed: _RowsSeen; a kohya
layout captioned in place: the image's `.txt` / `.caption` files). New captions go where the
dataset keeps its captions: into metadata.jsonl when the dataset has one and no .txt sidecars
(the row's other keys, e.g. kohya repeats, are kept; a missing row is appended), else into
`<stem>.txt` (a kohya layout: beside its image, in the file the plan names). Every write is staged then renamed (data.writes.staged_write) under the
dataset's lock, so a stop or a kill at any moment leaves each caption file old or new, never
half-written; metadata.jsonl is rewritten line by line as it is read
(data.metadata_write), once per several captions when the model is fast (CaptionWriter: a kill
then loses at most ~FLUSH_RATIO rewrites' time of captions, made again by the next run). A
caption is one line of text, at most MAX_CAPTION_BYTES like every caption (a longer one is
refused, never cut), and never holds the trigger placeholder (clean_caption).
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
import unicodedata
from collections.abc import Callable
from pathlib import Path

from lorastudio.captioning.plan import KOHYA_CAPTION_SUFFIX, CaptionPlan, CaptionStore, has_caption
from lorastudio.data import decoded
from lorastudio.data.captions import (
    MAX_CAPTION_BYTES,
    TRIGGER_PLACEHOLDER,
    apply_trigger,
    read_metadata,
)
from lorastudio.data.discovery import METADATA_FILE, caption_files_of
from lorastudio.data.image_edits import write_caption
from lorastudio.data.metadata_write import set_metadata_captions
from lorastudio.data.row_names import folder_rows
from lorastudio.data.writes import dataset_lock
from lorastudio.errors import DatasetError, NoSpaceLeft, WriteFailed

_SPACES = re.compile(r"\s+")
_REPLACEMENT = "\ufffd"  # the decoder's stand-in for bytes that are no character
# a write the dataset folder refuses for every file (read-only file system, permission denied):
# the run stops rather than caption every later image only to fail its write the same way
FOLDER_WIDE_ERRNOS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})
FLUSH_RATIO = 10.0  # metadata store: a rewrite of metadata.jsonl at most ~1/10 of a run's time
# an image the run found without a caption that has one when its caption is written (RELIABILITY 1940)
KEPT_REASON = (
    "it was given a caption while the job ran (by hand or another tool): kept, the model's not written"
)


def clean_caption(text: str, prefix: str | None = None) -> str:
    """One line: control and format characters dropped, and U+FFFD (what a byte-level
    tokenizer decodes from a character cut by max_tokens or an invalid byte sequence: no text of
    the image), whitespace runs made one space, `prefix` put first ("<prefix>, <caption>", not
    doubled). Raises ValueError (the image's failure, nothing written) when nothing is left of
    the model's text, when it holds the TRIGGER_PLACEHOLDER (a run would put its trigger word
    there: the model's text would not reach training as written) or when the caption is over
    MAX_CAPTION_BYTES (never cut: a caption cut short is not what the model said)."""
    kept = "".join(" " if unicodedata.category(ch)[0] == "C" or ch == _REPLACEMENT else ch for ch in text)
    caption = _SPACES.sub(" ", kept).strip()
    if not caption:
        raise ValueError("the model gave an empty caption")
    if TRIGGER_PLACEHOLDER in caption:
        raise ValueError(
            f"the model's caption holds {TRIGGER_PLACEHOLDER!r}, the placeholder a run replaces with its "
            "trigger word: not written (write this caption by hand)"
        )
    caption = apply_trigger(caption, prefix)
    size = len(caption.encode("utf-8"))
    if size > MAX_CAPTION_BYTES:
        raise ValueError(
            f"the model's caption is {size:,} bytes{' with the prefix' if prefix else ''}, over the "
            f"{MAX_CAPTION_BYTES // 1024} KB a caption may hold: not written (lower max_tokens)"
        )
    return caption


class CaptionWriter:
    """Writes a run's captions where `store` says, under the dataset's lock (see the module
    docstring). "txt": `write` writes the image's `<stem>.txt` at once (raising for that image),
    and queues its caption for its metadata.jsonl row where that row holds one (rewritten as
    below: a row's old text would be a second caption).
    "metadata": `write` queues the caption and `flush_due` rewrites metadata.jsonl with every
    caption queued since the last rewrite once the time since that rewrite is FLUSH_RATIO times
    what it took (with a model slower than that, each caption is written before the next image;
    a fast one on a large dataset shares a rewrite among several captions: the run's time stays
    linear in its images, not quadratic in a file rewritten whole per image). `flush` writes
    what is queued (the run's end, a stop). Both rewrite calls raise NoSpaceLeft, DatasetError
    (naming the captions not saved) or OSError: the run stops.
    `keep_new` (a run without overwrite): an image that was given a caption after the plan (a
    `.txt` or a row written by hand or by another tool while the model ran) keeps it:
    `captioned_now` says so before the model is asked (no model call for it), `write` returns
    False for it (the .txt store: its caption files and metadata.jsonl row checked under the
    dataset's lock just before the rename), and `flush_due` / `flush` return the names whose
    queued caption was dropped so (a row or a .txt found when metadata.jsonl is rewritten):
    "keep existing captions" holds for the whole run, not only for what the plan saw."""

    def __init__(
        self,
        folder: Path,
        store: CaptionStore,
        clock: Callable[[], float] = time.monotonic,
        *,
        keep_new: bool = False,
        plan: CaptionPlan | None = None,
    ):
        self.folder, self.store, self._clock, self.keep_new = folder, store, clock, keep_new
        # a kohya layout captioned in place (`plan.in_place`): each image's caption beside it, in
        # the plan's target file when it has one; no metadata.jsonl (a run of it reads none)
        self.in_place = plan is not None and plan.in_place
        self._targets = plan.targets if plan is not None else {}
        self.pending: dict[str, str] = {}
        # "txt": the images whose metadata.jsonl row holds a caption: each new .txt's text is queued
        # for its row too, rewritten in batches like the metadata store (RELIABILITY 1735)
        self._rowed = _captioned_rows(folder) if store == "txt" and not self.in_place else set()
        self._rows = _RowsSeen(folder / METADATA_FILE)  # the rows' captions now (keep_new)
        self._last_end, self._last_cost = clock(), 0.0
        self.rewrites = 0  # metadata.jsonl rewrites made

    def captioned_now(self, image: Path) -> bool:
        """`keep_new`: whether `image` has a caption now, a non-blank `.txt` or metadata.jsonl
        row (given since the plan: the run keeps it without asking the model); False without
        `keep_new`. A stat of metadata.jsonl, read again only when it changed (_RowsSeen)."""
        if not self.keep_new:
            return False
        if self.in_place:  # a kohya folder's: every .txt (any case) and its .caption, no rows
            files = {*caption_files_of(image), image.with_suffix(KOHYA_CAPTION_SUFFIX)}
            if (target := self._targets.get(image)) is not None:
                files.add(target)
            return any(has_caption(image, path, {}) for path in files if path.is_file())
        return has_caption(image, _first(caption_files_of(image)), self._rows.captions())

    def write(self, image: Path, caption: str) -> bool:
        """Write (a .txt) or queue (a row) `caption` for `image`; False when nothing is, as the
        image has a caption now (`keep_new`: a .txt, or for the .txt store its metadata.jsonl
        row too, which a .txt written under it would shadow, RELIABILITY 2051)."""
        if self.store == "txt":
            try:
                with dataset_lock(self.folder.parent, self.folder.name):
                    if self.captioned_now(image):
                        return False
                    write_caption(
                        image.parent, image.name, caption, sync_row=False, target=self._targets.get(image)
                    )
            except IsADirectoryError:  # a folder at <stem>.txt: the rename onto it fails
                raise DatasetError(
                    f"no caption written for {image.name}",
                    [f"{image.name}: {image.stem}.txt is a folder, not a caption file; nothing written"],
                ) from None
            if image.name in self._rowed:
                self.pending[image.name] = caption
        else:
            self.pending[image.name] = caption
        return True

    def unwritable(self, err: OSError) -> DatasetError:
        """The run's stop when the folder refuses a write (FOLDER_WIDE_ERRNOS)."""
        why = err.strerror or str(err)
        return DatasetError(
            f"dataset folder {self.folder.name} cannot be written",
            [f"{self.folder}: {why}; captioning stopped (the captions written so far are kept)"],
        )

    def flush_due(self) -> list[str]:
        if self.pending and self._clock() - self._last_end >= FLUSH_RATIO * self._last_cost:
            return self.flush()
        return []

    def flush(self) -> list[str]:
        """Rewrite metadata.jsonl with the queued captions; returns the names dropped from the
        queue as captioned meanwhile (`keep_new`: the metadata store)."""
        if not self.pending:
            return []
        start = self._clock()
        kept: list[str] = []
        try:
            with dataset_lock(self.folder.parent, self.folder.name):
                table = self.folder / METADATA_FILE
                if self.keep_new and self.store == "metadata":
                    kept = self._captioned_meanwhile(table)
                    for name in kept:
                        del self.pending[name]
                if self.pending:
                    set_metadata_captions(table, self.pending, append_missing=self.store == "metadata")
        except (DatasetError, WriteFailed, OSError) as err:
            if isinstance(err, NoSpaceLeft):
                raise
            names = ", ".join(sorted(self.pending))
            lost = (
                "are not saved"
                if self.store == "metadata"
                else "are saved in their .txt, their rows keep the old ones"
            )
            raise DatasetError(
                f"{METADATA_FILE} of {self.folder.name} could not be written",
                [f"{METADATA_FILE}: {err}; the captions of {names} {lost}"],
            ) from err
        if self.pending:
            self.rewrites += 1
        self.pending.clear()
        end = self._clock()
        self._last_end, self._last_cost = end, end - start
        return kept

    def _captioned_meanwhile(self, table: Path) -> list[str]:
        """The queued names that have a caption now: a row holding one, or a .txt (it wins over
        the row: a row written under it would be a second caption). The caller holds the lock."""
        rows = read_metadata(table).captions if table.is_file() and not table.is_symlink() else {}
        rows = folder_rows(rows, self.folder)  # each image's row, as the scan matches it (2200)
        return sorted(
            name
            for name in self.pending
            if has_caption(self.folder / name, _first(caption_files_of(self.folder / name)), rows)
        )


def _first(paths: tuple[Path, ...]) -> Path | None:
    return paths[0] if paths else None


class _RowsSeen:
    """The captions of metadata.jsonl's rows (`table`), read again only when the file changed
    since the last read: its (size, mtime_ns, inode, ctime_ns), so a run's check before each
    image costs a stat, not a read of a file of thousands of rows (RELIABILITY 2051). A file
    "racy" at its read (data/decoded.racy: its ctime not safely older than the read, within the
    file system's tick; or stamped ahead of now) is read again at the next call, as git does with
    a racily clean index: an edit of the same size in the same tick is not missed. No file, a
    link or other non-file: no rows (the scan names a link); one that cannot be read
    (DatasetError: the scan names it): no rows."""

    def __init__(self, table: Path) -> None:
        self.table = table
        self._key: decoded.FileKey | None = None
        self._captions: dict[str, str] = {}
        self.reads = 0  # how many times the file was read (tests)

    def captions(self) -> dict[str, str]:
        keyed = decoded.file_clock_ns()
        try:
            st = os.lstat(self.table)
        except OSError:
            st = None
        if st is None or not stat.S_ISREG(st.st_mode):
            self._key, self._captions = None, {}
            return self._captions
        key = (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
        if key != self._key:
            self.reads += 1
            try:
                self._captions = folder_rows(read_metadata(self.table).captions, self.table.parent)
            except DatasetError:
                self._captions = {}
            ahead = st.st_mtime_ns > keyed  # a clock ahead: its stamp says nothing yet
            self._key = None if ahead or decoded.racy(key, keyed) else key
        return self._captions


def _captioned_rows(folder: Path) -> set[str]:
    """The image names whose metadata.jsonl row in `folder` holds a caption (none: no file, or
    one that cannot be read, which the scan names)."""
    table = folder / METADATA_FILE
    if table.is_symlink() or not table.is_file():
        return set()
    try:
        rows = folder_rows(read_metadata(table).captions, folder)  # by image, as the scan (2200)
        return {name for name, text in rows.items() if text.strip()}
    except DatasetError:
        return set()


def store_caption(
    folder: Path, image: Path, caption: str, store: CaptionStore, *, sync_row: bool = True
) -> None:
    """Write `caption` for `image` into `store` (see the module docstring) at once (a .txt:
    `sync_row` as data.image_edits.write_caption's). Raises DatasetError (caption too long,
    metadata.jsonl unreadable), NoSpaceLeft, OSError."""
    with dataset_lock(folder.parent, folder.name):
        if store == "txt":
            write_caption(folder, image.name, caption, sync_row=sync_row)
        else:
            set_metadata_captions(folder / METADATA_FILE, {image.name: caption}, append_missing=True)
