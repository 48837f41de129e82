"""A multipart upload's files without one open file descriptor per file.

starlette's MultiPartParser spools each file part into a SpooledTemporaryFile that moves to an
unnamed temporary file past 1 MiB and stays open until the form is closed: an upload of 300
photos of a few MB each held 300 descriptors, so under `ulimit -n 256` (1,024, a common default,
for an upload of ~1,000 photos) it failed "Too many open files: /tmp/tmpXXXX" (session 30
environment audit). `ParkingMultiPartParser` spools each file into a `ParkedSpool` instead: in
memory up to `SPOOL_MEMORY_BYTES`, then into a named file of the temporary folder (TMPDIR, as
starlette's) whose descriptor is closed ("parked") after each write (the parser writes the data
of every part a chunk of the body holds before it ends any of them), at a rewind and whenever a
reader reaches its end, and opened again at the position it had by the next read or seek. An upload then
holds a descriptor only for the part being received and the file being stored. The named file is
removed when the form closes (a server killed mid-upload leaves it to the system's temporary-file
cleaning, as any program's temporary file).

`ParkingMultiPartParser` overrides one hook of starlette's parser and reads its private state
(`_current_part`, `_charset`, `_current_files`, `_files_to_close_on_error`, starlette 1.x; fastapi,
which brings starlette, was unpinned). `INTERNALS_PROBLEM` says at import whether this starlette
has them (None: it does); `parser_class()` gives ParkingMultiPartParser then, else starlette's own
parser (a descriptor per spooled file, as before fix 907) with the problem logged once, so that an
upgrade that changed them costs the descriptor saving, never an upload (was: an AttributeError, a
500 for every upload, or an ImportError that stopped `serve` altogether). The test suite fails
with the problem named (tests/api/test_api_upload_spool_internals.py).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import tempfile
from collections.abc import AsyncGenerator
from typing import Any

import starlette
from starlette.datastructures import Headers, UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from lorastudio.errors import writing

try:  # python-multipart's, re-exported by starlette's formparsers (not a public name of it)
    from starlette.formparsers import parse_options_header  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - an upgrade took it away: see INTERNALS_PROBLEM
    parse_options_header = None

log_ = logging.getLogger("lorastudio.api")


def _user_safe_decode(src: bytes | bytearray, codec: str) -> str:
    """A part's name or filename as starlette decodes it (its private helper of that name, kept
    here so that a starlette upgrade cannot take it away): the form's charset, else latin-1."""
    try:
        return src.decode(codec)
    except (UnicodeDecodeError, LookupError):
        return src.decode("latin-1")


SPOOL_MEMORY_BYTES = 1 << 20  # starlette's spool_max_size
WHAT = "an uploaded file's temporary copy in the temporary folder (TMPDIR)"


class ParkedSpool:
    """A file-like spool (write, read, seek, tell, close; `_rolled` as SpooledTemporaryFile's, which
    UploadFile reads) whose disk file is opened only while used (see the module docstring)."""

    def __init__(self, max_memory: int = SPOOL_MEMORY_BYTES) -> None:
        self._max_memory = max_memory
        self._memory: io.BytesIO | None = io.BytesIO()
        self._path: str | None = None
        self._fh: io.BufferedRandom | None = None
        self._pos = 0
        self._rolled = False

    def _disk(self) -> io.BufferedRandom:
        """The disk file, opened again at the parked position when it was parked."""
        if self._fh is None:
            if self._path is None:  # a file in memory has no disk file to open again
                raise ValueError("the spooled upload has no disk file")
            self._fh = open(self._path, "r+b")  # noqa: SIM115 (closed by park or close)
            self._fh.seek(self._pos)
        return self._fh

    def park(self) -> None:
        """Close the disk file's descriptor, keeping the file and the position (no-op in memory)."""
        if self._fh is not None:
            fh, self._fh = self._fh, None
            with contextlib.suppress(OSError, ValueError):  # after a failed write: closed all the same
                self._pos = fh.tell()
            with contextlib.suppress(OSError, ValueError):
                fh.close()

    def write(self, data: bytes) -> int:
        """Append `data`. A failed write of the disk file (a full TMPDIR) is NoSpaceLeft or
        WriteFailed naming it (was a 507 "a file this request changes could not be written")."""
        if self._memory is not None and self._memory.tell() + len(data) <= self._max_memory:
            return self._memory.write(data)
        with writing(WHAT, self._path or tempfile.gettempdir()):
            if self._memory is not None:
                fd, self._path = tempfile.mkstemp(prefix="lorastudio-upload-")
                os.close(fd)
                self._rolled = True
                held, self._memory = self._memory, None
                self._pos = 0
                self._disk().write(held.getvalue())
            disk = self._disk()
            written = disk.write(data)
            disk.flush()  # its failure raised here, named (park ignores a failed flush)
            self.park()  # the parser writes every part of a chunk before it ends any of them
        return written

    def read(self, size: int = -1) -> bytes:
        if self._memory is not None:
            return self._memory.read(size)
        data = self._disk().read(size)
        if not data or size < 0:  # at its end: a reader that stops here holds no descriptor
            self.park()
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        if self._memory is not None:
            return self._memory.seek(offset, whence)
        position = self._disk().seek(offset, whence)
        if offset == 0 and whence == 0:  # the parser's seek at a part's end; a reader's rewind
            self.park()
        return position

    def tell(self) -> int:
        if self._memory is not None:
            return self._memory.tell()
        return self._fh.tell() if self._fh is not None else self._pos

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def flush(self) -> None:
        if self._fh is not None:
            self._fh.flush()

    def fileno(self) -> int:  # a descriptor of its own would defeat the parking
        raise io.UnsupportedOperation("a parked upload spool has no steady descriptor")

    @property
    def closed(self) -> bool:
        return self._memory is None and self._path is None

    def close(self) -> None:
        """Free the memory, or close and remove the disk file. Safe to call twice."""
        self.park()
        self._memory = None
        if self._path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._path)
            self._path = None


class ParkingMultiPartParser(MultiPartParser):
    """starlette's parser with each file part spooled into a ParkedSpool."""

    def on_headers_finished(self) -> None:
        disposition, options = parse_options_header(self._current_part.content_disposition)
        if b"filename" not in options:
            super().on_headers_finished()
            return
        try:
            self._current_part.field_name = _user_safe_decode(options[b"name"], self._charset)
        except KeyError:
            raise MultiPartException(
                'The Content-Disposition header field "name" must be provided.'
            ) from None
        self._current_files += 1
        if self._current_files > self.max_files:
            raise MultiPartException(f"Too many files. Maximum number of files is {self.max_files}.")
        spool = ParkedSpool(self.spool_max_size)
        self._files_to_close_on_error.append(spool)  # type: ignore[arg-type]
        self._current_part.file = UploadFile(
            file=spool,  # type: ignore[arg-type]
            size=0,
            filename=_user_safe_decode(options[b"filename"], self._charset),
            headers=Headers(raw=self._current_part.item_headers),
        )


# What ParkingMultiPartParser reads of starlette's parser: (instance attribute, what it must be).
_PARSER_STATE = ("_current_part", "_charset", "_current_files", "_files_to_close_on_error", "max_files")
_PART_FIELDS = ("content_disposition", "field_name", "file", "item_headers")


def internals_problem(parser: type[MultiPartParser] = MultiPartParser) -> str | None:
    """Why ParkingMultiPartParser cannot subclass `parser` (starlette's MultiPartParser) here,
    naming the missing internal and the starlette version; None when it can. Builds one parser
    (nothing is read) to see its instance state."""

    async def nothing() -> AsyncGenerator[bytes, None]:
        yield b""

    where = f"starlette {getattr(starlette, '__version__', '?')}"
    if parse_options_header is None:
        return f"{where}: starlette.formparsers.parse_options_header is gone"
    if not callable(getattr(parser, "on_headers_finished", None)):
        return f"{where}: MultiPartParser.on_headers_finished is gone"
    if not isinstance(getattr(parser, "spool_max_size", None), int):
        return f"{where}: MultiPartParser.spool_max_size is not an int"
    try:
        probe = parser(Headers({"content-type": "multipart/form-data; boundary=x"}), nothing(), max_files=1)
    except TypeError as err:
        return f"{where}: MultiPartParser(headers, stream, max_files=...) fails: {err}"
    missing = [name for name in _PARSER_STATE if not hasattr(probe, name)]
    if not missing:
        missing = [f"_current_part.{n}" for n in _PART_FIELDS if not hasattr(probe._current_part, n)]
    if not missing and not isinstance(probe._files_to_close_on_error, list):
        missing = ["_files_to_close_on_error (a list)"]
    return f"{where}: MultiPartParser lacks {', '.join(missing)}" if missing else None


INTERNALS_PROBLEM = internals_problem()
_warned: list[bool] = []


def parser_class() -> type[MultiPartParser]:
    """ParkingMultiPartParser when this starlette has what it reads (INTERNALS_PROBLEM is None),
    else starlette's own MultiPartParser, the problem logged once (module docstring)."""
    if INTERNALS_PROBLEM is None:
        return ParkingMultiPartParser
    if not _warned:
        _warned.append(True)
        log_.warning(
            "uploads use starlette's own multipart parser (one open file per spooled file): %s; "
            "lorastudio's parser needs starlette's internals of 1.x",
            INTERNALS_PROBLEM,
        )
    return MultiPartParser
