"""The gallery image of an asynchronous generation whose "done" record was lost (RELIABILITY 1773).

A generation commits its image to the gallery (the sidecar, then the PNG: jobs/generation.py),
then its registry writes the record's "done" (jobs/generation_jobs._end). A server killed between
the two (kill -9, a power cut), or a disk that refused that write (only logged), left the record
in flight, and after the restart it was answered `interrupted`, "nothing of it was kept; send it
again", while its image was in the gallery. Now each sidecar names its request (`request_id`),
and a record read as interrupted is first looked for in the gallery: a PNG whose sidecar names
the request (written no earlier than the request was sent) makes it done, with that image and
the warnings its answer carried (the sidecar keeps them since RELIABILITY 2211; an older
sidecar's image answers none).

Only sidecars changed since the request was sent are read (through gallery_sidecars' memo), and
the caller asks once per record (it rewrites the record as done, or remembers that none was
found), so a poll of an interrupted request does not list the gallery each time. No torch, no HTTP.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import Any

from lorastudio.jobs.gallery_sidecars import read_sidecar

log = logging.getLogger("lorastudio.jobs")

_CLOCK_SLACK_S = 2.0  # a sidecar's mtime may read a little before `created` (file system times)


def committed_image(gallery: Path, request_id: str, since: float) -> tuple[dict[str, Any], float] | None:
    """The result (the gallery image's fields, as a finished generation answers them) of the
    image request `request_id` committed to `gallery`, and the PNG's mtime; None when there is
    none. `since`: when the request was sent (older sidecars are not read)."""
    try:
        entries = list(os.scandir(gallery))
    except OSError as err:
        if not isinstance(err, FileNotFoundError):
            log.warning("could not look in the gallery %s for generation %s: %s", gallery, request_id, err)
        return None
    for entry in entries:
        if entry.name.startswith(".") or not entry.name.endswith(".json"):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_mtime < since - _CLOCK_SLACK_S:
            continue
        meta = read_sidecar(Path(entry.path))
        if meta.get("request_id") != request_id:
            continue
        png = Path(entry.path).with_suffix(".png")
        try:
            png_st = os.stat(png, follow_symlinks=False)
        except OSError:
            return None  # its sidecar, not its image: the kill came before the image's rename
        if not stat.S_ISREG(png_st.st_mode):
            return None
        seconds, warnings = meta.get("seconds"), meta.get("warnings")
        result = {
            **meta,
            "file": png.name,
            "path": str(png),
            "seconds": seconds if isinstance(seconds, int | float) else 0.0,
            # a sidecar before fix 2211 has none; a hand's other form is not the answer's
            "warnings": [w for w in warnings if isinstance(w, str)] if isinstance(warnings, list) else [],
        }
        return result, png_st.st_mtime
    return None
