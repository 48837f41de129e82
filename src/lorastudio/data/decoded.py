"""Which images of a dataset folder had every pixel decoded: a small record per folder.

A header check and a chunk walk (data/images.py, data/image_headers.py) cannot see a PNG whose
compressed pixel data is cut short or garbled under valid chunk CRCs, nor a JPEG whose entropy
data breaks at full size; only decoding every pixel can. Decoding every image of a large dataset
on every preflight would cost minutes, so each file is decoded fully once (at upload, or at the
first check that meets it) and remembered here by (name, size, mtime_ns, inode, ctime_ns): a
file edited, replaced or renamed over is decoded again at the next check. ctime_ns is the one
the user cannot set (`cp -p`, `touch -r` set mtime; any write, chmod or rename moves ctime), so
a file rewritten in place with its size and mtime put back is decoded again too. With each file
its header facts (size after EXIF transpose, orientation) are kept, so that a later scan of an
unchanged file needs one stat and no read (`known`); only the size limit, a setting, is
compared again.

The record of a folder is one JSON file under the studio's cache (settings.decoded_record_dir,
<home>/cache/decoded/<key>.json, the key a hash of the folder's path and identity): the scan
never writes into a dataset folder. It lists only the images the folder held at its last
save; a lost or unreadable record only costs decodes again (it is a cache, never a verdict),
and two processes saving at once keep both's rows (a line lost to the other's whole write is
decoded again). A save appends what changed since its load to the journal beside the record (<key>.journal:
data/decoded_journal.py); the record is written whole, the journal begun again, when there is
no journal of this version or it outgrows half the record (an upload batch into 25,000 images
wrote all 25,000 rows: RELIABILITY 2210). data/decoded_files.py and the sweep know the journal.

The dataset's other images live in the same record: control images (data/pairs.py) and loss
masks (data/masks.py) are decoded fully once too, under the same budget. A file of the folder
itself is keyed by its name, one of a sub-folder by its relative path (`control/a.png`,
`masks/a.png`), one of a parallel control folder outside it (control_dirs) by its absolute path,
so a control and a target of one name never share an entry (`record_key`).

A check's full decodes are bounded by time (FULL_DECODE_BUDGET_S: `wants_full`, and the check
loops of data/decode_checks.py, which run them on both decode threads): the files left over keep
the cheap check (ImageItem.decoded False; the preflight report names them:
scan_warnings.undecoded_warning)
and are decoded fully by a later check, and in any case by the run's own scan, which has no
budget (training/preflight.py): it decodes every file left before any model loads, fails the run
naming one that does not decode, and records the rest.

An entry is recorded only when its file was settled when keyed (`racy`: git's racy case; the
next check decodes a racy one again).

The process keeps the last record it read or wrote, parsed, while its file's identity (device,
inode, size, mtime_ns, ctime_ns) stays the same (data/decoded_memo.py), with how far it read
the journal (a later load reads the lines appended since): an upload of 32 images into a
dataset of 50,000 parsed the whole record each time (uploading N images cost O(N^2): RELIABILITY
2111). One that is stale (another process's save in the same tick) only lacks or holds entries
that `known` compares with each file's own key, as it does any record's.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from lorastudio import json_read
from lorastudio.capped_read import read_capped
from lorastudio.data import decoded_journal, decoded_memo
from lorastudio.data.decoded_files import record_name
from lorastudio.data.images import DECODE_RULES, ImageInfo
from lorastudio.data.safe_open import FolderId, open_in_folder
from lorastudio.errors import DatasetError
from lorastudio.staged_files import staging_path

if TYPE_CHECKING:
    from lorastudio.data.decode_progress import DecodeProgress

# what an entry holds and which checks it stands for (images.probe_image's): 3 added ctime_ns to
# the key; an older record reads as empty (its files not decoded: decoded again, then recorded)
RECORD_VERSION = 3
RECORD_MAX_BYTES = 64 << 20  # ~300,000 entries; a larger file is not read (decodes again)
# Seconds of full decodes one check spends on files not yet decoded; the rest wait for the next
# check or the run's own scan (no budget: training/preflight.py).
FULL_DECODE_BUDGET_S = 30.0

FileKey = tuple[int, int, int, int]  # (size, mtime_ns, inode, ctime_ns)
# git's "racy" case: a file written again within one tick of the file-time clock keeps its
# mtime and ctime (the kernel stamps files from a coarse clock: one jiffy, up to 10 ms; whole
# seconds, 2 s on FAT, on some file systems). An entry is recorded only when its ctime was
# safely older than the moment its key was taken (`add`): any write after that moment moves it.
RACY_NS = 20_000_000  # a fine-grained file system: two of the coarsest jiffies
RACY_COARSE_NS = 2_000_000_000  # a ctime in whole seconds: such a file system's tick (FAT: 2 s)


def file_clock_ns() -> int:
    """Now, on the clock the kernel stamps files from (the wall clock; a test fakes its tick, so
    callers elsewhere call it through this module: `decoded.file_clock_ns()`)."""
    return time.time_ns()


def racy(key: FileKey, keyed_ns: int) -> bool:
    """Whether a file of `key`, stat'ed at or after `keyed_ns` (file_clock_ns), may yet be
    written again without its key changing: its ctime (which only the kernel sets) is not safely
    older than that moment, within the file system's tick (whole seconds: RACY_COARSE_NS)."""
    ctime = key[3]
    margin = RACY_COARSE_NS if ctime % 1_000_000_000 == 0 else RACY_NS
    return ctime > keyed_ns - margin


def wait_out_racy(paths: Iterable[Path]) -> None:
    """Wait (at most RACY_NS) until the files of `paths` the caller has just written or moved
    are safely older than the file clock's tick, so that keying them now records them (an
    upload's files: data/uploads.py); a file system of whole seconds is not waited for (its
    files stay racy: the next check decodes them again)."""
    ctimes = [k[3] for k in map(file_key, paths) if k is not None and k[3] % 1_000_000_000]
    if ctimes:
        left = max(ctimes) + RACY_NS - file_clock_ns()
        if 0 < left <= RACY_NS:
            time.sleep(left / 1e9 + 0.001)


def file_key(path: Path) -> FileKey | None:
    """(size, mtime_ns, inode, ctime_ns) of `path` (a link not followed); None when it cannot be
    stat'ed. With the ctime, which no one but the kernel sets, a file rewritten in place to the
    same size with its mtime put back (`cp -p`, `rsync --inplace -t`, os.utime) is another
    version (as scan.file_sha256's memo); a rename changes the ctime too (uploads.py)."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns


def same_contents_key(before: FileKey | None, after: FileKey | None) -> bool:
    """Whether `after` is `before` moved by a rename alone (the same size, mtime and inode; a
    rename moves ctime): an upload's staged file, keyed before its decode, once moved in."""
    return before is not None and after is not None and before[:3] == after[:3]


class DecodedRecord:
    """The decoded-files record of one dataset folder (`folder`, identity `folder_id`), kept in
    `record_dir`. Load with `load`, ask `known`, add with `add`, write with `save`; `progress`
    (the run's scan: data/decode_progress.py) hears of the full decodes to come (`expect`) and
    of each one (data/decode_checks.check_images)."""

    def __init__(
        self,
        record_dir: Path,
        folder: Path,
        folder_id: FolderId,
        budget_s: float | None = None,
        progress: DecodeProgress | None = None,
    ):
        self.folder = Path(os.path.abspath(folder))
        self.device = folder_id[0]  # saved: a sweep tells a removed folder from an unmounted one
        self.path = record_dir / f"{record_name(self.folder, folder_id)}.json"
        self.files: dict[str, tuple[FileKey, ImageInfo]] = {}
        self.budget_s = FULL_DECODE_BUDGET_S if budget_s is None else budget_s
        self.spent_s = 0.0  # seconds of full decodes this record's scan spent
        self.decoded = 0  # files this scan decoded fully and passed (add; recorded unless changed meanwhile)
        self.changed = False
        self.progress = progress
        self._added: set[str] = set()  # entries set since the load (the journal line's rows)
        self._dropped: set[str] = set()  # entries dropped since the load
        self._journal: decoded_memo.Kept | None = None  # the journal as read at the load
        self._record_bytes = 0  # the record file's size at the load
        self._compact = True  # a change writes the record whole (no usable journal)
        self._fold = False  # the next save writes it whole, changed or not (journal outgrown or foreign)

    @classmethod
    def load(
        cls,
        record_dir: Path,
        folder: Path,
        folder_id: FolderId,
        budget_s: float | None = None,
        progress: DecodeProgress | None = None,
    ) -> DecodedRecord:
        """The record of `folder` as last saved (empty when there is none or it cannot be read);
        `budget_s`: seconds of full decodes its scan may spend (default FULL_DECODE_BUDGET_S);
        `progress`: the run's decode count and stop check (None: none)."""
        record = cls(record_dir, folder, folder_id, budget_s, progress)
        ident = decoded_memo.file_identity(record.path)
        record._record_bytes = ident[2] if ident is not None else 0
        kept = decoded_memo.remembered(record.path, ident, RECORD_MAX_BYTES)
        jpath = decoded_journal.journal_path(record.path)
        found = decoded_journal.journal_id(jpath) if ident is not None else None  # none of no record
        start = 0
        if kept is not None and found is not None and kept.journal == found[0] and found[1] >= kept.offset:
            files: dict[str, tuple[FileKey, ImageInfo]] | None = dict(kept.files)  # kept is shared
            start = kept.offset
        elif kept is not None and found is None and kept.journal is None:
            files = dict(kept.files)
        else:
            files = _read_body(record.path) if ident is not None else None
        record.files = files if files is not None else {}
        read = None
        if files is not None and found is not None:
            read = decoded_journal.read_lines(jpath, start, RECORD_MAX_BYTES)
        if read is not None:
            decoded_journal.apply(record.files, read[0], _entry)
            record._journal = decoded_memo.Kept({}, found[0], read[1])  # type: ignore[index]
            record._compact = record._fold = decoded_journal.compact_due(read[1], record._record_bytes)
        elif found is not None and files is not None:  # another version's journal, or unreadable
            record._fold = True
        if ident is not None and files is not None:  # a refused read (over the bound, garbled) is read again
            at = record._journal or decoded_memo.Kept({}, None, 0)
            decoded_memo.remember(
                record.path, ident, decoded_memo.Kept(dict(record.files), at.journal, at.offset)
            )
        return record

    def record_key(self, path: Path) -> str:
        """The entry name of `path`: its name for a file of the folder, its relative path
        (posix) for one of a sub-folder, its absolute path for one outside the folder."""
        path = Path(os.path.abspath(path))
        if path.parent == self.folder:
            return path.name
        if path.is_relative_to(self.folder):
            return path.relative_to(self.folder).as_posix()
        return str(path)

    def _path_of(self, key: str) -> Path:
        return Path(key) if os.path.isabs(key) else self.folder / key

    def known(self, path: Path) -> ImageInfo | None:
        """The header facts of `path` (a file of this folder) when it was fully decoded and
        passed every check of images.probe_image as it is now (the size limit aside); else None."""
        entry = self.files.get(self.record_key(path))
        return entry[1] if entry is not None and entry[0] == file_key(path) else None

    def expect(self, paths: Iterable[Path]) -> None:
        """Tell the scan's progress (when there is one) how many of `paths`, the files a check
        loop is about to meet, it will decode fully: those not recorded as they are now, each
        once. A stat per file; nothing without a progress."""
        if self.progress is not None:
            self.progress.expect(len({self.record_key(p) for p in paths if self.known(p) is None}))

    def wants_full(self, path: Path) -> bool:
        """Whether a check of `path` should decode it fully now: not decoded as it is, and this
        scan's time budget not spent."""
        return self.known(path) is None and self.spent_s < self.budget_s

    def add(
        self,
        path: Path,
        before: FileKey | None,
        info: ImageInfo,
        seconds: float = 0.0,
        keyed_ns: int | None = None,
    ) -> bool:
        """Record `path` as fully decoded with its header facts `info` (what probe_image gave):
        `before`, its file_key taken before the decode (kept only when the file is still the
        same, so a file changed meanwhile is decoded again); `seconds` the decode took (counted
        against the budget); `keyed_ns`: file_clock_ns() read before `before` was stat'ed (None:
        now, for a caller that has just taken it). A racy entry (`racy`: its ctime within the
        file clock's tick of that moment, so a same-size rewrite in that tick would keep the key)
        is not recorded: the next check decodes it again, as git checks such an entry's
        contents. Returns whether it was recorded."""
        self.spent_s += seconds
        self.decoded += 1
        if before is None or file_key(path) != before:
            return False
        if racy(before, file_clock_ns() if keyed_ns is None else keyed_ns):
            return False
        name = self.record_key(path)
        self.files[name] = (before, info)
        self._added.add(name)
        self._dropped.discard(name)
        self.changed = True
        return True

    def save(self, names: set[str] | None = None) -> None:
        """Write what changed since the load when anything did or `names` drops some of it;
        `names`: the image names the folder holds now (others of the folder itself are left out;
        an entry of a control or a mask, keyed by a path, is left out when its file is gone or
        changed). The changes are one line appended to the journal; the record is written whole
        (staged and renamed) with a fresh journal when the load found no journal of this version,
        or the journal would outgrow half the record (decoded_journal.compact_due). Errors
        writing are ignored: the record is a cache."""
        if names is not None:
            kept = {
                n: k
                for n, k in self.files.items()
                if (n in names if "/" not in n else file_key(self._path_of(n)) == k[0])
            }
            if len(kept) != len(self.files):
                gone = self.files.keys() - kept.keys()
                self._dropped |= gone
                self._added -= gone
                self.files = kept
                self.changed = True
        if not (self.changed or self._fold):
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self._compact or not self._append():
                self._write_whole()
        except (OSError, DatasetError):
            return
        self.changed = False
        self._added.clear()
        self._dropped.clear()

    def _row(self, name: str) -> list[int]:
        key, info = self.files[name]
        return [*key, info.width, info.height, info.orientation]

    def _append(self) -> bool:
        """Append this save's changes to the journal read at the load; False when the record is
        to be written whole instead (no journal now, or it would outgrow half the record)."""
        journal = self._journal
        if journal is None:
            return False
        line = decoded_journal.change_line(
            sorted(self._dropped), {n: self._row(n) for n in sorted(self._added)}
        )
        if decoded_journal.compact_due(journal.offset + len(line), self._record_bytes):
            return False
        try:
            jid, before, after = decoded_journal.append_line(decoded_journal.journal_path(self.path), line)
        except FileNotFoundError:  # removed since the load (another process's record written whole)
            return False
        self._journal = decoded_memo.Kept({}, jid, after)
        ident = decoded_memo.file_identity(self.path)
        if (
            jid == journal.journal and before == journal.offset and ident is not None
        ):  # no other writer between
            decoded_memo.remember(self.path, ident, decoded_memo.Kept(dict(self.files), jid, after))
        else:
            decoded_memo.remember(self.path, None, None)
        return True

    def _write_whole(self) -> None:
        """Write the record whole (staged and renamed), then a fresh journal beside it. Raises
        OSError (nothing left staged)."""
        body = {
            "version": RECORD_VERSION,
            "rules": DECODE_RULES,
            "folder": str(self.folder),
            "device": self.device,  # data/decoded_sweep.py: before "files", read without them
            "files": {n: self._row(n) for n in sorted(self.files)},
        }
        tmp = staging_path(self.path)  # staged_files.py: a killed writer's is removed at a server start
        try:
            tmp.write_text(json.dumps(body, separators=(",", ":")), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        decoded_memo.remember(self.path, None, None)
        jid, size = decoded_journal.write_fresh(decoded_journal.journal_path(self.path))
        ident = decoded_memo.file_identity(self.path)
        self._record_bytes = ident[2] if ident is not None else 0
        self._journal = decoded_memo.Kept({}, jid, size)
        self._compact = self._fold = False
        if ident is not None:
            decoded_memo.remember(self.path, ident, decoded_memo.Kept(dict(self.files), jid, size))


def _read_record(path: Path) -> dict[str, tuple[FileKey, ImageInfo]]:
    """The entries of the record file `path`; empty when it is missing, not a regular file (a
    link is not followed, a FIFO not waited on: safe_open), over RECORD_MAX_BYTES, not JSON, of
    another version or rules, or of any other form than `save` writes (a damaged or planted
    record costs decodes again, never an error nor a wrong size: rows are checked one by one)."""
    return _read_body(path) or {}


def _read_body(path: Path) -> dict[str, tuple[FileKey, ImageInfo]] | None:
    """`_read_record`'s entries, None where it reads the record as empty for any reason but
    holding no rows (the load then writes it whole at its next save, journal ignored)."""
    try:
        with open_in_folder(path) as fh:
            text = read_capped(fh, RECORD_MAX_BYTES + 1)
        if len(text) > RECORD_MAX_BYTES:
            return None
        data = json_read.loads(text.decode("utf-8"))
    except (DatasetError, OSError, ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    if not (
        isinstance(data, dict)
        and data.get("version") == RECORD_VERSION
        and data.get("rules") == DECODE_RULES
        and isinstance(data.get("files"), dict)
    ):
        return None
    files = {}
    for name, row in data["files"].items():
        entry = _entry(row)
        if entry is not None:
            files[name] = entry
    return files


def _entry(row: object) -> tuple[FileKey, ImageInfo] | None:
    """A saved row [size, mtime_ns, inode, ctime_ns, width, height, orientation] as (key,
    info); None unless it is exactly that: 7 ints (JSON's, not floats nor bools), size and inode
    not negative (times may be: before 1970), width and height at least 1, an EXIF orientation
    1-8."""
    if not (isinstance(row, list) and len(row) == 7 and all(type(v) is int for v in row)):
        return None
    size, mtime, inode, ctime, width, height, orientation = row
    if size < 0 or inode < 0 or width < 1 or height < 1 or not 1 <= orientation <= 8:
        return None
    return (size, mtime, inode, ctime), ImageInfo(width, height, orientation)
