"""How many of a dataset's images have a caption a fresh run refuses for another trainer's markup
(captions.unread_markup: `{trigger}`-like text, kohya's `|||`; RELIABILITY 1733), for the
dataset listing's summary (GET /api/datasets, the Train form's picker: RELIABILITY 1862), and
which have a blank .txt (no caption: the listing's caption count, RELIABILITY 2071). No torch.

The caption read is the one the run's scan and the dataset's detail read (captions.own_caption):
an image's .txt (the first of its stem) wins over its metadata.jsonl row unless it is blank (then
the row trains: RELIABILITY 2070); a caption file that cannot be read counts none (the detail and
the preflight name it).

What it costs a listing: each folder's verdicts are remembered with the folder's version
(device, inode, mtime_ns, ctime_ns: what a file added, removed or renamed over changes, as the
studio's caption edits do, staged then renamed) and each caption file's (file_version.version_of)
and metadata.jsonl's. An unchanged folder costs one stat of the folder, and at most every
RESWEEP_S an lstat of each caption file, so that a caption rewritten in place (an editor that
writes into the file; the folder's version stays) is seen within RESWEEP_S; only the files whose
version changed are read again. Measured on the shared 2-core host, 10,000 captions: their lstats
~90-280 ms, reading them all ~0.8 s (once, then the changed ones). A file or folder changed
within SETTLED_NS is not remembered (its time stamp's tick could hide a second change: git's
racy case, as data/discovery.py's listings). metadata.jsonl is read only where an image has no
.txt or a blank one (its rows caption nothing else) and only up to LISTING_METADATA_MAX bytes: a larger one's
rows are not counted here, and the listing says so (CaptionMarks.rows_unread: its
`markup_counted` false; a listing must not read 60 MB a call: tests/reliability/
test_dataset_files.py; the dataset's detail and the run's preflight still name each caption).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from lorastudio.data.captions import read_metadata, read_sidecar, unread_markup
from lorastudio.data.discovery import DatasetFiles
from lorastudio.data.row_names import folder_rows
from lorastudio.errors import DatasetError
from lorastudio.file_version import FileVersion, version_of

RESWEEP_S = 10.0  # an unchanged folder's caption files are statted again at most this often
SETTLED_NS = 2_000_000_000  # a file changed more recently than this is read again at the next sweep
_FOLDERS_MAX = 64
# a caption file's verdict: a caption with markup, one without (or unreadable), blank (no caption:
# the image's metadata.jsonl row trains, as the run's scan takes it)
Verdict = Literal["markup", "plain", "blank"]
LISTING_METADATA_MAX = 8 * 2**20  # a metadata.jsonl larger than this is not read by a listing


@dataclass
class _Marks:
    """A folder's remembered verdicts: `folder` its version at the sweep (None: not settled then),
    `swept_at` the sweep's time.monotonic(), `files` caption file name -> (its version, its Verdict), `meta` (metadata.jsonl's version, the image names whose row holds markup)."""

    folder: tuple[int, int, int, int] | None
    swept_at: float
    count: int
    files: dict[str, tuple[FileVersion, Verdict]] = field(default_factory=dict)
    meta: tuple[FileVersion, frozenset[str]] | None = None
    blank: frozenset[str] = frozenset()  # the images whose .txt is blank (CaptionMarks.blank_txt)
    rows_unread: bool = False  # CaptionMarks.rows_unread


_marks: dict[str, _Marks] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class CaptionMarks:
    """What a listing says of a folder's captions: `markup`, how many images have a caption a
    fresh run refuses for markup; `blank_txt`, the images whose .txt is blank (no caption: their
    metadata.jsonl row, if any, trains; listing.summary_of counts them captioned only by a row);
    `rows_unread`, whether images captioned by their row were left out of `markup` because
    metadata.jsonl is over LISTING_METADATA_MAX (the listing says so: RELIABILITY 2072)."""

    markup: int = 0
    blank_txt: frozenset[str] = frozenset()
    rows_unread: bool = False  # rows caption some images, but metadata.jsonl is over LISTING_METADATA_MAX


def caption_marks(folder: Path, files: DatasetFiles) -> CaptionMarks:
    """The CaptionMarks of `folder`'s images (`files`: its data.discovery listing; module
    docstring). None counted for a folder that cannot be statted."""
    try:
        st = os.stat(folder, follow_symlinks=False)
    except OSError:
        return CaptionMarks()
    now_ns = time.time_ns()
    version = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
    with _lock:
        known = _marks.get(str(folder))
    if known is not None and known.folder == version and time.monotonic() - known.swept_at < RESWEEP_S:
        return CaptionMarks(known.count, known.blank, known.rows_unread)
    marks = _sweep(files, known, now_ns)
    marks.folder = version if _settled(st, now_ns) else None
    with _lock:
        if len(_marks) >= _FOLDERS_MAX and str(folder) not in _marks:
            _marks.pop(next(iter(_marks)))
        _marks[str(folder)] = marks
    return CaptionMarks(marks.count, marks.blank, marks.rows_unread)


def _settled(st: os.stat_result, now_ns: int) -> bool:
    """Whether a file (or folder) was last changed more than SETTLED_NS before `now_ns`."""
    return now_ns - max(st.st_mtime_ns, st.st_ctime_ns) > SETTLED_NS


def _sweep(files: DatasetFiles, known: _Marks | None, now_ns: int) -> _Marks:
    """The verdicts of `files`' captions, reading only those whose version differs from `known`'s.
    An image whose .txt is blank takes its metadata.jsonl row, as the run's scan does
    (captions.own_caption); a .txt that cannot be read counts none."""
    marks = _Marks(folder=None, swept_at=time.monotonic(), count=0)
    by_row: list[str] = []  # the images captioned by their row: no .txt, or a blank one
    blank: list[str] = []
    for image in files.images:
        sidecar = files.sidecars.get(image.stem)
        verdict = None if sidecar is None else _sidecar_verdict(sidecar, known, now_ns, marks)
        if verdict is None or verdict == "blank":
            by_row.append(image.name)
            blank += [image.name] if verdict == "blank" else []
        else:
            marks.count += verdict == "markup"
    marks.blank = frozenset(blank)
    if by_row:  # its rows caption only these
        rows = _row_marks(files.metadata, known.meta if known else None, now_ns, marks)
        if rows is None:  # over LISTING_METADATA_MAX: not read, and said (CaptionMarks.rows_unread)
            marks.rows_unread = True
        else:
            marks.count += sum(name in rows for name in by_row)
    return marks


def _sidecar_verdict(sidecar: Path, known: _Marks | None, now_ns: int, marks: _Marks) -> Verdict | None:
    """What caption file `sidecar` holds (read again where its version differs from `known`'s;
    remembered in `marks` once settled): None where it is gone since the listing (no caption
    read: the image is counted by its row, as a run would scan it now)."""
    try:
        st = os.stat(sidecar, follow_symlinks=False)
    except OSError:
        return None
    file_version = version_of(st)
    before = known.files.get(sidecar.name) if known else None
    verdict: Verdict
    if before is not None and before[0] == file_version:
        verdict = before[1]
    else:
        try:
            text = read_sidecar(sidecar)
        except DatasetError:  # unreadable: the detail and the preflight name it; no row stands in
            verdict = "plain"
        else:
            verdict = "blank" if text is None else "markup" if unread_markup(text) is not None else "plain"
    if _settled(st, now_ns):
        marks.files[sidecar.name] = (file_version, verdict)
    return verdict


def _row_marks(
    metadata: Path | None, known: tuple[FileVersion, frozenset[str]] | None, now_ns: int, marks: _Marks
) -> frozenset[str] | None:
    """The image names whose metadata.jsonl row holds markup (read again when the file's version
    differs from `known`'s); none for no file or one that cannot be read (the detail says why);
    None for a file over LISTING_METADATA_MAX (not read)."""
    if metadata is None:
        return frozenset()
    try:
        st = os.stat(metadata, follow_symlinks=False)
    except OSError:
        return frozenset()
    meta_version = version_of(st)
    if st.st_size > LISTING_METADATA_MAX:
        return None
    if known is not None and known[0] == meta_version:
        names = known[1]
    else:
        try:
            captions = folder_rows(read_metadata(metadata).captions, metadata.parent)  # by image (2200)
        except DatasetError:
            captions = {}
        names = frozenset(name for name, text in captions.items() if unread_markup(text) is not None)
    if _settled(st, now_ns):
        marks.meta = (meta_version, names)
    return names
