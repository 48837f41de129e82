"""Content fingerprints of a base model's components, for the encode cache's keys
(data/disk_cache.py, data/latent_keys.py, data/text_keys.py), a run's identity
(training/resume/identity_base.py) and what a gallery image records (jobs/generation_base.py).

A component's fingerprint covers its files (names, sizes, a sample of their bytes: all of a
file up to FULL_HASH_BYTES, else its header and SAMPLES spread chunks) and its config.json: a
different VAE (even one with identical shapes, e.g. another random initialisation) is another
model. Hand-written: diffusers and huggingface_hub keep no content hash of a local folder's
weights. A hub id is read from the hub cache (its snapshot found by a bounded ref read); one
not downloaded yet is fingerprinted by its id and revision (`source_on_disk` tells). A component
the base does not have (FLUX.1's text_encoder_3) is the fixed ABSENT (rule 3), whatever names
the base: the same files as a hub id, its snapshot folder, a copy or after a home move give the
same caption-shard keys and gallery identity.

Imports no torch.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from lorastudio import json_read
from lorastudio.file_version import FileVersion, version_of

FULL_HASH_BYTES = 64 * 1024 * 1024  # a file up to this size is hashed whole
SAMPLES = 64  # chunks sampled from a larger file
SAMPLE_BYTES = 64 * 1024
# how component_fingerprint takes a component: 1 (before session 26) a hub-cache one by its
# config.json only, 2 a hub-cache tokenizer by its files too, 3 (session 30) a component the base
# lacks as ABSENT (rules 1-2: "hub:<the base's name>@<revision>", which changed with the name)
# and a hub-cache scheduler by its files (rules 1-2: by the hub id);
# a run's identity records the rule (training/resume/identity_base.py) and a resume compares under it
RULE = 3
ABSENT = "absent"  # rule 3's part of a component the base does not have (no folder, not indexed)
TOKENIZER_FILES = (
    "tokenizer_config.json",
    "tokenizer.json",
    "vocab.json",
    "merges.txt",
    "spiece.model",
    "tokenizer.model",
    "vocab.txt",
    "special_tokens_map.json",
)
# path -> (its file version, its digest), the least recently used first: one entry a path (a
# file changed replaces its entry), at most MEMO_MAX (~200 B each: ~1 MB); a long-running server
# seeing model files added or changed kept every version it ever read.
MEMO_MAX = 4096  # files: a few hundred models' components
_file_memo: OrderedDict[str, tuple[FileVersion, str]] = OrderedDict()
_memo_lock = threading.Lock()


def _sampled_digest(path: Path) -> str:
    """sha256 of a file's size and bytes (whole up to FULL_HASH_BYTES, else its first 1 MiB and
    SAMPLES chunks spread evenly), memoised per path while its file version
    (file_version.version_of) stays the same, at most MEMO_MAX paths (the least recently used
    forgotten first)."""
    st = path.stat()
    version, key = version_of(st), str(path)
    with _memo_lock:
        hit = _file_memo.get(key)
        if hit is not None and hit[0] == version:
            _file_memo.move_to_end(key)
            return hit[1]
    digest = hashlib.sha256(str(st.st_size).encode())
    with path.open("rb") as fh:
        if st.st_size <= FULL_HASH_BYTES:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
        else:
            digest.update(fh.read(1 << 20))  # a safetensors header: names, shapes, offsets
            step = st.st_size // SAMPLES
            for n in range(SAMPLES):
                fh.seek(n * step)
                digest.update(fh.read(SAMPLE_BYTES))
    value = digest.hexdigest()
    with _memo_lock:
        _file_memo[key] = (version, value)
        _file_memo.move_to_end(key)
        while len(_file_memo) > MEMO_MAX:
            _file_memo.popitem(last=False)
    return value


def _hub_folder(repo: str, component: str, revision: str | None, rule: int = RULE) -> Path | None:
    """The local snapshot folder of a hub repo's component, when the hub cache holds it: its
    `<component>/config.json`, or (rule 2) for a tokenizer one of TOKENIZER_FILES (a tokenizer
    folder has no config.json: rule 1 found none and fingerprinted it by the hub id), or (rule 3)
    its scheduler_config.json (a scheduler's: rules 1-2 fingerprinted it by the hub id). The
    snapshot is found by basemodels.hubcache.cached_snapshot: its ref read bounded (a ref that
    is a FIFO, a /dev/zero link or a sparse terabyte is no snapshot; huggingface_hub's
    try_to_load_from_cache read a regular one whole, until the out-of-memory kill) in the hub
    cache the environment names now."""
    from lorastudio.basemodels.hubcache import cached_snapshot

    snapshot = cached_snapshot(repo, revision)
    folder = snapshot / component if snapshot is not None else None
    markers = (
        "config.json",
        *(TOKENIZER_FILES if rule >= 2 and component.startswith("tokenizer") else ()),
        *(("scheduler_config.json",) if rule >= 3 else ()),
    )
    return folder if folder is not None and any((folder / m).is_file() for m in markers) else None


def _component_folder(
    source: Any, component: str, revision: str | None, rule: int = RULE
) -> tuple[Path | None, Path | None]:
    """(the single file holding `component`, else None; the component's local folder, else None:
    a hub id not in the local hub cache) of model_source `source`."""
    file = getattr(source, "file", None)
    holder = Path(file) if file is not None and component in getattr(source, "components", ()) else None
    if file is not None:
        source = source.config
    folder = (
        Path(source) / component
        if Path(source).is_dir()
        else _hub_folder(str(source), component, revision, rule)
    )
    return holder, folder if folder is not None and folder.is_dir() else None


def component_on_disk(source: Any, component: str, revision: str | None) -> bool:
    """Whether `component_fingerprint` of it is a content fingerprint now: its files are on this
    machine (a folder, the hub cache, a single file holding it), not a hub id yet to download."""
    holder, folder = _component_folder(source, component, revision)
    return holder is not None or folder is not None


def source_on_disk(source: Any, revision: str | None) -> bool:
    """Whether model_source `source` is on this machine: a folder or a single file, or a hub id
    whose snapshot at `revision` the hub cache holds whole (its model_index.json and a folder for
    each component it names). False for a hub id yet to download, or partly downloaded: its
    missing components' fingerprints name the id (`component_fingerprint`), not content, until
    the loaders fetch them."""
    if getattr(source, "file", None) is not None:
        source = source.config
    if Path(str(source)).is_dir():
        return True
    from lorastudio.basemodels.hubcache import cached_snapshot, is_hub_id

    snapshot = cached_snapshot(str(source), revision) if is_hub_id(str(source)) else None
    return snapshot is not None and _whole(snapshot)


def _whole(snapshot: Path) -> bool:
    """Whether every component snapshot/model_index.json names (a [library, class] pair) has its
    folder there (a model_index.json that is missing, over 1 MiB or not a JSON object: not whole)."""
    parts = _index_parts(snapshot)
    return parts is not None and all((snapshot / name).is_dir() for name in parts)


def _index_parts(snapshot: Path) -> list[str] | None:
    """The components snapshot/model_index.json names (a [library, class] pair: not [null, null]),
    or None for a model_index.json that is missing, over 1 MiB or not a JSON object."""
    index = snapshot / "model_index.json"
    try:
        if not index.is_file() or index.stat().st_size > 1 << 20:
            return None
        names = json_read.loads(index.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(names, dict):
        return None
    return [k for k, v in names.items() if not k.startswith("_") and isinstance(v, list) and None not in v]


def _lacks(source: Any, component: str, revision: str | None) -> bool:
    """Whether base `source` (a folder or a hub id: a single file's config) is on this machine and
    does not have `component`: a local folder without its folder, or a hub-cache snapshot whose
    model_index.json does not name it (a [library, class] pair). False for a hub id not in the
    hub cache, or whose snapshot lacks a component its index names (yet to download)."""
    if Path(str(source)).is_dir():
        return not (Path(str(source)) / component).is_dir()
    from lorastudio.basemodels.hubcache import cached_snapshot, is_hub_id

    snapshot = cached_snapshot(str(source), revision) if is_hub_id(str(source)) else None
    names = _index_parts(snapshot) if snapshot is not None else None
    return names is not None and component not in names


def component_fingerprint(source: Any, component: str, revision: str | None, rule: int = RULE) -> str:
    """A short content fingerprint of one component (e.g. "vae") of a run's base: `source` is
    model_source(cfg) (a folder, a hub id, or a SingleFile holding the component). A hub id that
    is not in the local hub cache is fingerprinted by its id and revision; a component the base
    does not have (`_lacks`) by ABSENT. `rule`: RULE, or the rule of a checkpoint's identity
    (training/resume/identity_base.py): 1 (before session 26: a hub-cache tokenizer by its id, its files
    unread), 2 (before session 30: a component the base lacks by the base's name and revision)."""
    parts: list[str] = [component]
    holder, folder = _component_folder(source, component, revision, rule)
    if holder is not None:
        parts.append(_sampled_digest(holder))
    if getattr(source, "file", None) is not None:
        source = source.config  # a single file's configs (and the components it lacks)
    if folder is None and rule >= 3 and _lacks(source, component, revision):
        parts.append(ABSENT)
    elif folder is None:
        parts += [f"hub:{source}@{revision}"]
    else:
        for path in sorted(folder.iterdir()):
            if path.is_file() and not path.name.startswith("."):
                parts += [path.name, _sampled_digest(path)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]
