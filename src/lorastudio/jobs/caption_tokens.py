"""Captions longer than the text encoder reads, named in the preflight (torch-free).

The run's start counts each caption with its pipeline's own tokenizer and prompt template
(training/inputs/caption_length.py, fix 99). The API server may not import torch or transformers, so
the preflight counts with the `tokenizers` package (Rust, torch-free) reading the base model's
`tokenizer.json` (or, without one, a T5's `spiece.model` with sentencepiece and a CLIP's
`vocab.json` + `merges.txt` built as transformers builds them: jobs/caption_count_slow.py), and renders a chat template with jinja2 as transformers does
(`render_chat`): the counts equal training/inputs/caption_length.caption_token_counts on every family's
tiny model (tests/unit/jobs/test_caption_tokens_parity.py). The pipelines' template strings are
copied in jobs/caption_count.py (`QWEN_IMAGE_TEMPLATE`, `KREA2_*`, `FLUX2_SYSTEM_MESSAGE`); a
test checks them against diffusers' pipelines. The folder's files are untrusted (a FIFO, a link
to /dev/zero or out of the folder, a template that loops or renders gigabytes): they are read
and rendered only in a child process bounded in time, memory and CPU (jobs/caption_count.py).

Contract of `caption_token_section`: it reads only local files (a pipeline folder, or a hub id's
snapshot in the hub cache; a single file's base config), never the network. It returns None for
a family whose captions are not measured (no CaptionTokens, or one that never cuts); otherwise
{"limit", "counted": bool, "cut": [{"file", "tokens"}], "note"}. When it cannot count
(no tokenizer.json and no slow files counted here; the files not on this machine; a file that is not a
regular one inside the folder, or too large; a chat template this renderer does not run; a
count past count_timeout_s) `counted` is False, `cut` empty and `note` says the count is made at the
start of the run: a note, never a problem.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lorastudio import json_read
from lorastudio.config import TrainConfig
from lorastudio.data import DatasetScan
from lorastudio.data.caption_variants import scan_variants
from lorastudio.data.items import item_name
from lorastudio.families.spec import FamilySpec
from lorastudio.jobs import caption_count_cache
from lorastudio.jobs.caption_count import (  # noqa: F401 (the counting's names, re-exported)
    FLUX2_SYSTEM_MESSAGE,
    KREA2_DROP,
    KREA2_PREFIX,
    KREA2_SUFFIX_TOKENS,
    QWEN_IMAGE_DROP,
    QWEN_IMAGE_TEMPLATE,
    CannotCount,
    render_chat,
)
from lorastudio.jobs.childenv import child_environment
from lorastudio.jobs.time_work import seen_text_tokens
from lorastudio.training.inputs.caption_length import QWEN_IMAGE_TOKENIZER_MAX, token_limit

log = logging.getLogger("lorastudio.jobs")
COUNT_TIMEOUT_S = 20.0  # the child's wall-clock limit (a real tokenizer.json loads in ~1 s) ...
# ... plus this per character of the texts: 50,000 captions of 200 characters took 7.3 CPU s and 22 s
# of wall time on the loaded 2-core host, past a fixed 20 s, so a large dataset's preflight waited
# 20 s every time to say "not counted" (RELIABILITY 2112)
COUNT_S_PER_CHAR = 4e-6
_children = threading.BoundedSemaphore(2)  # count children at once
# the child caps its address space: no thread pool (tokenizers' rayon: a thread and a malloc arena
# of 64 MiB reserved per core, past the cap on a many-core host) and few arenas
_CHILD_ENV = {"TOKENIZERS_PARALLELISM": "false", "RAYON_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2"}
MAX_WAITING = 2  # counts that may wait for a child; more are left to the start at once
_slots = threading.BoundedSemaphore(2 + MAX_WAITING)  # the running counts + the waiting

AT_START = "caption lengths are counted at the start of the run ({why})"


def caption_token_section(
    spec: FamilySpec, cfg: TrainConfig, scan: DatasetScan, folder: Path | None
) -> dict[str, Any] | None:
    """The preflight's `dataset.caption_tokens`: each image's caption (every variant the run
    encodes) counted as the pipeline builds it; `cut` names those over `limit`, longest first.
    `folder` is the base's local pipeline folder (None: not on this machine). None for a family
    that is not measured."""
    return _counted(spec, cfg, scan, folder)[0]


def caption_tokens_counted(
    spec: FamilySpec, cfg: TrainConfig, scan: DatasetScan, folder: Path | None
) -> tuple[dict[str, Any] | None, float | None]:
    """(`caption_token_section`'s section, the mean text tokens a caption gives the denoiser of a
    family that cuts them to the caption's own: time_work.seen_text_tokens over the same counts,
    None where that is not so or nothing was counted): one count for the preflight's section and
    its wall-time forecast."""
    section, counts, limit = _counted(spec, cfg, scan, folder)
    return section, seen_text_tokens(spec, counts or [], limit)


def _counted(
    spec: FamilySpec, cfg: TrainConfig, scan: DatasetScan, folder: Path | None
) -> tuple[dict[str, Any] | None, list[int] | None, int | None]:
    """(the section, each unique caption's count or None where not counted, the limit)."""
    limit = token_limit(spec, cfg)
    if limit is None or spec.caption_tokens is None:
        return None, None, None
    if spec.caption_tokens.template == "qwen_image":
        limit = min(limit, QWEN_IMAGE_TOKENIZER_MAX)
    variants = scan_variants(scan, cfg.caption_variants, cfg.seed)
    texts = sorted({v for vs in variants for v in vs})
    counts, why = _counts(spec, folder, texts)
    if counts is None:
        return {"limit": limit, "counted": False, "cut": [], "note": AT_START.format(why=why)}, None, limit
    by_text = dict(zip(texts, counts, strict=True))
    labels = scan.labels()
    cut = []
    for item, vs in zip(scan.items, variants, strict=True):
        longest = max((by_text[v] for v in vs), default=0)
        if longest > limit:
            cut.append({"file": item_name(item, labels), "tokens": longest})
    cut.sort(key=lambda c: (-c["tokens"], c["file"]))
    note = None
    if cut:
        note = (
            f"{len(cut)} of {len(scan.items)} captions are longer than the {limit} tokens {spec.title}'s text "
            f"encoder reads and train cut there"
            + ("" if spec.caption_tokens.template == "plain" else " (its prompt template's tokens included)")
            + f"; the longest: {cut[0]['file']} ({cut[0]['tokens']} tokens)"
        )
    return {"limit": limit, "counted": True, "cut": cut, "note": note}, counts, limit


def tokenizer_folder(cfg: TrainConfig, model_dir: Path | None) -> Path | None:
    """Where the run's tokenizers are on this machine: the local pipeline folder, a single
    file's base config folder, or a hub id's cached snapshot; None when not on disk."""
    from lorastudio.basemodels.hubcache import cached_snapshot, is_hub_id

    if model_dir is not None:
        return model_dir
    where = (
        cfg.base_config if cfg.base_config is not None and Path(cfg.base_model).is_file() else cfg.base_model
    )
    folder = Path(where).expanduser()
    if folder.is_dir():
        return folder
    return cached_snapshot(where, cfg.revision) if is_hub_id(where) else None


def caption_counts(spec: FamilySpec, folder: Path, captions: Sequence[str]) -> list[int]:
    """Each caption's tokens as training/inputs/caption_length.caption_token_counts counts them, read
    from the pipeline folder's tokenizer files in a bounded child process
    (jobs/caption_count.py: count_timeout_s of wall time, its own memory and CPU caps, only
    regular files inside the folder). Raises CannotCount (with the reason), ValueError for a
    family that is not measured."""
    if spec.caption_tokens is None:
        raise ValueError(f"{spec.title}'s captions are not measured")
    root = folder.parent.parent if folder.parent.name == "snapshots" else folder  # a hub snapshot's blobs
    ask = {
        "folder": str(folder),
        "root": str(root),
        "tokenizer": spec.caption_tokens.tokenizer,
        "template": spec.caption_tokens.template,
        "texts": list(captions),
    }
    kept = caption_count_cache.lookup(ask)  # the same ask on unchanged files: no child again
    if kept is not None:
        return kept
    fingerprint = caption_count_cache.fingerprint_of(ask)  # before the child reads the files
    if not _slots.acquire(blocking=False):  # no pile-up of request threads behind the children
        raise CannotCount("other caption counts are running")
    try:
        with _children:
            done = _run_child(ask)
    finally:
        _slots.release()
    try:
        answer = json_read.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        log.warning("caption count failed (code %s): %s", done.returncode, done.stderr.strip()[-2000:])
        raise CannotCount(f"its tokenizer files could not be counted here (code {done.returncode})") from None
    if "cannot" in answer:
        raise CannotCount(str(answer["cannot"]))
    counts = [int(n) for n in answer["counts"]]
    caption_count_cache.keep(ask, counts, fingerprint)
    return counts


def count_timeout_s(texts: Sequence[str]) -> float:
    """The count child's wall-clock limit for `texts`: COUNT_TIMEOUT_S, and COUNT_S_PER_CHAR for
    each of their characters (the work grows with them)."""
    return COUNT_TIMEOUT_S + COUNT_S_PER_CHAR * sum(map(len, texts))


def _run_child(ask: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """The count child's run (jobs/caption_count.py). Raises CannotCount when it ran out of time
    or could not start."""
    try:
        return subprocess.run(
            [sys.executable, "-m", "lorastudio.jobs.caption_count"],
            input=json.dumps(ask),
            capture_output=True,
            encoding="utf-8",  # the child reads its stdin's bytes as UTF-8 (RELIABILITY 1029)
            errors="replace",
            timeout=count_timeout_s(ask["texts"]),
            env=child_environment(os.environ) | _CHILD_ENV,
            check=False,
        )
    except subprocess.TimeoutExpired:
        limit = count_timeout_s(ask["texts"])
        raise CannotCount(f"its tokenizer files were not counted within {limit:.0f} s") from None
    except OSError as err:
        raise CannotCount(f"the count could not start: {err}") from None


def _counts(spec: FamilySpec, folder: Path | None, texts: list[str]) -> tuple[list[int] | None, str]:
    """(each text's count, "") or (None, why they cannot be counted here)."""
    if folder is None:
        return None, "the base model's tokenizer is not on this machine"
    if not texts:
        return [], ""
    try:
        return caption_counts(spec, folder, texts), ""
    except CannotCount as err:
        return None, str(err)
