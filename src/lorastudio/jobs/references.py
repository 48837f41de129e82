"""Reference images for generation with an edit family (POST /api/generate/references, then
GenerateBody.references): uploaded once, checked like dataset images (header size cap and a
decode check, data/images.py), stored under <home>/gallery/references/<id><ext> and kept there
while a gallery image's sidecar names it (the references it was rendered with). One that no
sidecar names (its generation cancelled or failed, its images deleted, never used) is removed
ORPHAN_AFTER_S after its upload or its last use, by the next upload (`prune_orphans`): measured on
the host's boot clock for an upload or use of this boot (file_age.BootLedger, `.uses.json` beside
them), else by its mtime, never for one stamped in the future (file_age.older_than). No torch, no HTTP.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from lorastudio import families
from lorastudio.capped_read import read_capped
from lorastudio.data.decode_slots import DEFAULT_DECODE_PIXELS
from lorastudio.data.discovery import is_image_name
from lorastudio.data.images import probe_image
from lorastudio.data.paths import safe_component
from lorastudio.data.writes import copy_stream
from lorastudio.errors import ConfigError, DatasetError, FieldProblem, PathOutsideRoot, writing
from lorastudio.file_age import BootLedger, aged
from lorastudio.jobs.gallery import MAX_SIDECAR_BYTES, gallery_dir
from lorastudio.settings import Settings

if TYPE_CHECKING:
    from lorastudio.families.base import Variant

# An uploaded reference no gallery image names is removed this long after its upload or last use: a page
# that uploaded it keeps its id meanwhile (a request naming a removed one is a 400 saying so).
ORPHAN_AFTER_S = 7 * 24 * 3600.0
# A prune's pass and a generation's use of a reference, one at a time: a use that came during a
# prune's pass was not seen by it (its ages were read first), so a reference unused for
# ORPHAN_AFTER_S was removed just after a generation took it (RELIABILITY 1922).
_PRUNE_LOCK = threading.Lock()
USES = ".uses.json"  # file_age.BootLedger: each reference's store or last use on the boot clock
_REF_ID = re.compile(rb"[0-9a-f]{32}\.[A-Za-z0-9]{1,8}")  # store_reference's ids, as a sidecar holds them


def references_dir(settings: Settings) -> Path:
    """Where uploaded reference images are kept: <home>/gallery/references."""
    return settings.home / "gallery" / "references"


def store_reference(
    settings: Settings, name: str, stream: BinaryIO, decode_pixels: int = DEFAULT_DECODE_PIXELS
) -> str:
    """Check one uploaded image and keep it; returns its id (the stored file name). Written
    under a hidden staging name, checked, then renamed: a refused file leaves nothing.
    Raises DatasetError naming the file (not a PNG/JPEG/WebP, corrupt, over the size cap)."""
    if not is_image_name(name):
        raise DatasetError(f"cannot use {name} as a reference", [f"{name}: not a PNG, JPEG or WebP image"])
    folder = references_dir(settings)
    folder.mkdir(parents=True, exist_ok=True)
    ref_id = f"{uuid.uuid4().hex}{Path(name).suffix.lower()}"
    staging = folder / f".{ref_id}.partial"
    try:
        with (
            writing(f"the reference {name} could not be stored", folder, show_file=False),
            staging.open("wb") as out,
        ):  # a failed read of the upload is ReadFailed
            copy_stream(stream, out, f"the uploaded file {name}")
        try:
            probe_image(staging, settings.max_image_pixels, decode_pixels)
        except DatasetError as err:
            problems = [p.replace(staging.name, name) for p in err.problems]
            raise DatasetError(f"cannot use {name} as a reference", problems) from None
        os.replace(staging, folder / ref_id)
    finally:
        staging.unlink(missing_ok=True)
    _uses(settings).note(ref_id)
    return ref_id


def discard_references(settings: Settings, refs: Sequence[str]) -> None:
    """Remove stored references `refs` (an upload refused as a whole) and their ledger entries."""
    for ref in refs:
        (references_dir(settings) / ref).unlink(missing_ok=True)
    _uses(settings).forget(set(refs))


def _uses(settings: Settings) -> BootLedger:
    """When each reference was stored or last used, on the host's boot clock (file_age.py)."""
    return BootLedger(references_dir(settings) / USES)


def prune_orphans(settings: Settings, older_than_s: float = ORPHAN_AFTER_S) -> int:
    """Remove the uploaded references (and staging files a killed upload left) that no gallery
    sidecar names, uploaded or last used by a generation (`use_reference`) more than
    `older_than_s` ago: each upload used to be kept for ever,
    so the folder grew with every reference ever uploaded. A sidecar's ids are found in its
    raw text (a sidecar damaged past JSON still keeps what it names); one that cannot be read
    keeps nothing. Returns how many files were removed; errors removing one are skipped. A
    generation's `use_reference` waits for the pass (one server writes the home)."""
    with _PRUNE_LOCK:
        return _prune_orphans(settings, older_than_s)


def _prune_orphans(settings: Settings, older_than_s: float) -> int:
    folder = references_dir(settings)
    if not folder.is_dir():
        return 0
    named: set[str] = set()
    for sidecar in gallery_dir(settings).glob("*.json"):
        try:  # not blocking on a FIFO; a link's target is read too (it can only keep more)
            fd = os.open(sidecar, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as fh:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    named.update(m.decode() for m in _REF_ID.findall(read_capped(fh, MAX_SIDECAR_BYTES)))
        except OSError:
            continue
    ledger = _uses(settings)
    ages, now = ledger.ages(), time.time()  # a clock stepped since an upload of this boot: its boot-clock age
    removed, kept = 0, set()
    for path in folder.iterdir():
        if path.name.startswith(".") and not path.name.endswith(".partial"):
            continue
        try:
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                continue
            if path.name in named or not aged(path.name, st.st_mtime, older_than_s, ages, now):
                kept.add(path.name)
                continue
            path.unlink()
            removed += 1
        except OSError:
            kept.add(path.name)
            continue
    ledger.keep_only(kept)
    return removed


def reference_path(settings: Settings, ref_id: str) -> Path | None:
    """The stored reference `ref_id` (a plain file name in references_dir), None if there is none."""
    try:
        safe_component(ref_id, field="reference")
    except (ConfigError, PathOutsideRoot):
        return None
    path = references_dir(settings) / ref_id
    if ref_id.startswith(".") or path.is_symlink() or not path.is_file():
        return None
    return path


def use_reference(settings: Settings, ref_id: str) -> Path | None:
    """reference_path, and its time of use set to now (the file's mtime), so that
    `prune_orphans` counts its age from its last use by a generation, not from its upload (a
    prune's pass is waited for: the reference is then either gone, None, or seen as used)."""
    with _PRUNE_LOCK:
        path = reference_path(settings, ref_id)
        if path is not None:
            with contextlib.suppress(OSError):
                os.utime(path, follow_symlinks=False)
            _uses(settings).note(ref_id)
        return path


def used_references(settings: Settings, refs: Sequence[str]) -> tuple[str, ...]:
    """The paths of a generation's references `refs`, each marked used (`use_reference`).
    Raises ConfigError (field references.N) for one removed since the request's checks (a prune
    of references unused for ORPHAN_AFTER_S): before, its path was sent as "None" and the worker
    failed on a file of that name."""
    paths = [use_reference(settings, ref) for ref in refs]
    gone = [
        FieldProblem(
            f"references.{i}",
            f"uploaded reference {ref!r} was removed after the request's checks (unused for "
            f"{ORPHAN_AFTER_S / 86400:.0f} days: pruned); upload it again",
        )
        for i, (ref, path) in enumerate(zip(refs, paths, strict=True))
        if path is None
    ]
    if gone:
        raise ConfigError(gone)
    return tuple(str(path) for path in paths)


def reference_problems(
    settings: Settings, family: str, refs: Sequence[str], flavour: Variant | None = None
) -> list[FieldProblem]:
    """What is wrong with the references of a generation request: an unknown id, and the count
    (reference_count_problems)."""
    problems = [
        FieldProblem(
            f"references.{i}", f"no uploaded reference {ref!r} (POST /api/generate/references first)"
        )
        for i, ref in enumerate(refs)
        if reference_path(settings, ref) is None
    ]
    return problems + reference_count_problems(family, len(refs), flavour)


def reference_count_problems(
    family: str, count: int, flavour: Variant | None = None, field: str = "references"
) -> list[FieldProblem]:
    """`count` reference images against what the family takes (spec.control_images; `flavour`:
    the base checkpoint's Variant, whose own control_images count then, named by its title): more
    or fewer than it takes, any for a text-to-image family; [] for none or a count it takes.
    Shared by POST /api/generate and `lorastudio generate --control` (`field` names the input)."""
    low, high = families.get(family).spec.control_images
    if flavour is not None and flavour.control_images is not None:
        (low, high), family = flavour.control_images, flavour.title
    if count and high == 0:
        return [FieldProblem(field, f"{family} takes no reference images (text-to-image only)")]
    if count > high:
        return [FieldProblem(field, f"{family} takes at most {high} reference images, got {count}")]
    if count < low:
        return [FieldProblem(field, f"{family} needs {low} reference image(s), got {count}")]
    return []
