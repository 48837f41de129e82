"""The small JSON files of a model folder (model_index.json, config.json, a weight index,
lorastudio's fetch marker), read with bounds: the catalogue, the vetting and the fetch read
folders the user filled, and one damaged file must cost one entry's reason, never the listing.

`read_json(path)` opens without blocking (a FIFO named model_index.json would otherwise hold the
request's thread forever), reads only a regular file (links followed: hub-cache snapshots are
links; a link to /dev/zero is no regular file) of at most `max_bytes`, and turns every content
problem (too large, not UTF-8, not JSON, nested deeper than the parser goes) into JsonFileError,
a ValueError, so a caller's `except (OSError, ValueError)` covers all of them. No torch.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

MAX_JSON_BYTES = 16 * 1024 * 1024  # a large model's weight index is ~1 MB; a config a few KB


class JsonFileError(ValueError):
    """A model folder's JSON file that cannot be used: the message says why ("it is not a
    regular file ..."), not its content nor its path (the caller names the file)."""


def read_json(path: Path, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """The parsed JSON of the regular file `path`. Raises OSError when it cannot be opened
    (FileNotFoundError when missing) and JsonFileError: not a regular file (a FIFO, a device, a
    folder), larger than `max_bytes`, not UTF-8, not JSON, nested too deep."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise JsonFileError("it is not a regular file (a pipe, a device or a folder)")
        if info.st_size > max_bytes:
            raise JsonFileError(
                f"it is {info.st_size} bytes, more than the {max_bytes} a JSON file here may be"
            )
        chunks, total = [], 0
        while total <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:  # it grew while read
            raise JsonFileError(f"it is more than the {max_bytes} bytes a JSON file here may be")
    finally:
        os.close(fd)
    try:
        return json.loads(b"".join(chunks).decode("utf-8"))
    except UnicodeDecodeError:
        raise JsonFileError("it is not UTF-8 text") from None
    except RecursionError:
        raise JsonFileError("it nests arrays or objects deeper than the parser goes") from None
    except ValueError as err:
        raise JsonFileError(f"it is not JSON ({err})") from None
