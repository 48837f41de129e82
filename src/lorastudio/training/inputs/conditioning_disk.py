"""Phase 1 with the on-disk cache: the captions' text embeddings as shards, reused by later runs.

A run whose latents go to disk (data/disk_cache.latent_mode) keeps its captions' conditioning
there too: one safetensors shard per caption (variant) under <cache>/text/<encoders>/ (layout:
data/disk_cache.py), keyed by the family, the text encoders' and tokenizers' content fingerprint,
the dtype and device kind of the encode, max_sequence_length and the caption's sha256
(data/text_keys.py). Captions with a valid shard are not encoded: its crc32 checked, as the
latent shards', and its tensors checked against what the run's text encoders give (their names,
dtypes, fixed dims, finite values: training/inputs/text_signature.py, learnt once per encoder set from
two probe captions and kept in the home); a shard that does not fit is re-encoded and rewritten
(the run's log says so once, naming one). The kept signature is a cache too: when a caption
this run encodes does not fit it (an older lorastudio's record, a damaged one), the encoders are
right, and it is learnt again from the probes (a second encoder load, logged). The others go through
conditioning.encode_texts as before (the same chunks a run without the cache makes of them) and
each result is written as it comes (staged, then renamed), so RAM never holds the set's tensors.
Each shard keeps its caption's token count (metadata "caption_tokens": caption_length.caption_token_counts,
the tokenizers being part of the key), so a run whose captions all come from the cache names the
captions the text encoder cuts as a run that encodes them does (fix 99; the encoders, when they
load, count the captions whose shard has none). A shard written before the counts were kept
holds none: when no encoder loads, the note says how many captions it could not measure.
During training `DiskConditioning[key]` reads one caption's shard (whole, through
data/cache_io.py: no link followed; a shard without any tensor, or one that no longer fits the
signature, is a DatasetError naming it, never a crash in the model).

Not on disk: sample prompts and held-out captions (a few, in RAM as before), and the prompts of
a family whose prompt sees the control images (Qwen-Image-Edit: keyed by images too; in RAM).
A data-parallel run: rank 0 writes the shards, every rank reads them after a barrier; a shard
rank 0 cannot write stops the run (DatasetError naming it). One process keeps such a caption in
RAM instead.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from lorastudio.data.cache_io import hold_entry, prepare_cache_folder
from lorastudio.data.disk_cache import shard_path, source_on_disk
from lorastudio.data.text_keys import KIND, text_fingerprint, text_key, text_parts
from lorastudio.errors import DatasetError
from lorastudio.training.distributed import barrier, gather_round, group_context
from lorastudio.training.inputs.cache_shards import read_shard, read_shard_entry, write_shard
from lorastudio.training.inputs.caption_length import caption_counts, cut_note
from lorastudio.training.inputs.conditioning import Conditioning, Text, encode_texts
from lorastudio.training.inputs.text_signature import (
    PROBE_TEXTS,
    Signature,
    Summary,
    learn_signature,
    misfit,
    read_signature,
    signature_path,
    summarize,
    write_signature,
)

if TYPE_CHECKING:
    from lorastudio.config import TrainConfig
    from lorastudio.families.base import Family
    from lorastudio.training.events import Emit

log = logging.getLogger(__name__)
TOKENS = "caption_tokens"  # a text shard's metadata: its caption's token count
_COUNT = re.compile(r"[0-9]{1,9}")  # a count as write_shard keeps it (str(int)); \d takes any script's digits


class DiskConditioning(Mapping[str, dict[str, torch.Tensor]]):
    """cond_key -> a caption's tensors, read from its shard on each lookup (RAM for `kept`)."""

    def __init__(
        self,
        root: Path,
        model: str,
        keys: dict[str, str],
        kept: Conditioning,
        signature: Signature | None = None,
    ):
        self.root, self.model, self.shard_keys, self.kept = root, model, keys, kept
        self.signature = signature  # what the run's encoders give (None: not known, not checked)
        self.unwritten: list[str] = []  # "<shard>: <reason>" of the shards the disk refused (rank 0's)

    def unwritten_note(self) -> str | None:
        """A RunWarning's text when caption shards could not be written (disk full, read-only:
        held in RAM for this run, encoded again by the next), else None (RELIABILITY 1742)."""
        if not self.unwritten:
            return None
        return (
            f"{len(self.unwritten)} text embedding shard(s) could not be written to the disk cache "
            f"{self.root / KIND / self.model} ({self.unwritten[0]}): this run keeps them in RAM and the next run "
            "encodes them again; free space there (lorastudio cache prune), or set LORASTUDIO_CACHE_DIR to a "
            "writable disk"
        )

    def __getitem__(self, text: str) -> dict[str, torch.Tensor]:
        if text in self.kept:
            return self.kept[text]
        path = shard_path(self.root, KIND, self.model, self.shard_keys[text])
        found = read_shard(path, required=())
        if found is None or (self.signature is not None and misfit(summarize(found), self.signature)):
            raise DatasetError(
                "a text embedding shard vanished or was damaged during the run",
                [f"{path}: unreadable, or not what the text encoders give; restart the run (it re-encodes)"],
            )
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self.shard_keys)

    def __len__(self) -> int:
        return len(self.shard_keys)


def with_texts(conds: Conditioning, extra: Conditioning) -> Conditioning:
    """`conds` with `extra`'s texts added (held in RAM; a text in both keeps `conds`' tensors).
    A DiskConditioning stays lazy: the extra texts join its in-RAM part."""
    if isinstance(conds, DiskConditioning):
        conds.kept.update({k: v for k, v in extra.items() if k not in conds.shard_keys})
        return conds
    return {**extra, **conds}


def encode_texts_on_disk(
    family: Family,
    cfg: TrainConfig,
    groups: Sequence[Sequence[Text]],
    *,
    root: Path,
    dtype: torch.dtype,
    device: torch.device,
    emit: Emit,
    check_stop: Callable[[], None],
    notes: list[str] | None = None,
    said: list[str] | None = None,
    holds: list[int] | None = None,
    signatures: Path | None = None,
    one_by_one: Collection[int] = (),
) -> list[Conditioning]:
    """conditioning.encode_texts with the first group (the captions: plain strings) on disk; the
    other groups as encode_texts gives them (`one_by_one`: as there). Returns the first group as a DiskConditioning.
    The cache entry read is held (data/cache_io.hold_entry: no prune removes it) until the
    descriptor appended to `holds` is closed (training/loop.py closes them at the run's end).
    `signatures`: the home's folder of learnt encoder signatures (text_signature.py; None: the
    shards are checked against a signature learnt by this run alone)."""
    from lorastudio.families.single_file import model_source

    source = model_source(cfg)
    captions = [str(t) for t in groups[0]]
    model = ""  # the encoders' content fingerprint; "" until their files are here
    encoder: dict[str, object] = {}
    keys: dict[str, str] = {}
    record: Path | None = None  # the kept signature of these encoders (text_signature.py)

    def settle() -> None:
        """Key the captions by the encoders' files: at once when they are on disk, else once the
        loaders have fetched them (a hub id yet to download: keyed by its id, its shards would
        not be found by the next run, which keys them by content)."""
        nonlocal model, encoder, keys, record
        model = text_fingerprint(source, cfg.revision)
        encoder = text_parts(
            family.spec.name, model, str(dtype).removeprefix("torch."), device.type, cfg.max_sequence_length
        )
        prepare_cache_folder(root, KIND, model)  # CacheError naming a link or a file in the way
        held = hold_entry(root, KIND, model)  # before any shard is looked at: a prune keeps the entry
        if held is not None and holds is not None:
            holds.append(held)
        keys = {t: text_key(encoder, t) for t in captions}
        record = signature_path(signatures, model, encoder) if signatures is not None else None

    if source_on_disk(source, cfg.revision):
        settle()
    ctx = group_context()
    on_disk: dict[str, Summary] = {}  # the captions with a readable shard: what it holds
    counts: dict[str, int] = {}  # caption -> its tokens (a shard's, or counted by the encoders' tokenizer)
    for t in captions if model else []:
        found = read_shard_entry(shard_path(root, KIND, model, keys[t]), required=())
        if found is not None:
            on_disk[t] = summarize(found[0])
            if (tokens := _tokens(found[1])) is not None:
                counts[t] = tokens
    valid = set(gather_round(list(on_disk), ctx)[0])  # rank 0's view: every rank encodes the same chunks
    signature = read_signature(record) if record is not None else None
    # learn what the encoders give from two probe captions (with the captions a cold run encodes)
    probe = signature is None and bool(captions)
    if signature is not None:
        valid -= set(_misfits(captions, valid, on_disk, signature, root / KIND / model))
    missing = [t for t in captions if t not in valid]
    measurable = True  # False: the loaded encoders cannot count (no tokenizer): nothing is said

    def measure(encoders: object) -> None:
        nonlocal measurable
        found = caption_counts(family.spec, encoders, [t for t in captions if t not in counts])
        measurable = found is not None
        counts.update(found or {})

    stale: list[str] = []  # why the kept signature is not what the encoders give (a fresh caption's misfit)
    unwritten: list[str] = []  # the shards the disk refused, "<shard>: <reason>" (rank 0 writes)

    def sink(group: int, text: str, tensors: dict[str, torch.Tensor]) -> bool:
        if group != 0 or not all(isinstance(v, torch.Tensor) for v in tensors.values()):
            return False
        if not model:  # the encoders are loaded: their files are here now
            settle()
        if signature is not None and not stale and (why := misfit(_form(tensors), signature)):
            stale.append(why)  # every rank encodes the same chunks: every rank sees it
        if ctx.rank != 0:
            return True  # rank 0 writes it; this rank reads it after the barrier
        own = {k: v.detach().cpu().contiguous().clone() for k, v in tensors.items()}
        kept = {TOKENS: str(counts[text])} if text in counts else None
        written = write_shard(shard_path(root, KIND, model, keys[text]), own, kept, problems=unwritten)
        if not written and ctx.distributed:
            raise DatasetError(
                "cannot write the text embedding cache", [f"{shard_path(root, KIND, model, keys[text])}"]
            )
        return written

    def encode(first: list[str], rest: Sequence[Sequence[Text]]) -> list[Conditioning]:
        return encode_texts(
            family,
            cfg,
            [first, *rest],
            dtype=dtype,
            device=device,
            emit=emit,
            check_stop=check_stop,
            notes=notes,
            sink=sink,
            measure=measure,
            one_by_one=one_by_one,
        )

    found = encode(missing, [*groups[1:], *([list(PROBE_TEXTS)] if probe else [])])
    if not model:  # no caption was encoded (none given)
        settle()
    if probe:
        probed = found.pop()
        signature = learn_signature([probed[t] for t in PROBE_TEXTS])
        if signature is not None and record is not None and ctx.is_main:
            write_signature(record, signature)
        bad = _misfits(captions, valid, on_disk, signature, root / KIND / model)
        if bad:  # the encoders were loaded for the probe: a second load encodes these (rare)
            found[0].update(encode(bad, [])[0])
    elif stale:  # the kept signature is not what the encoders give: learnt again (a second load, rare)
        log.warning(
            "the kept signature of text encoders %s is not what they give (%s): learning it again",
            model,
            stale[0],
        )
        probed = encode([], [list(PROBE_TEXTS)])[1]
        signature = learn_signature([probed[t] for t in PROBE_TEXTS])
        if record is not None and ctx.is_main:
            if signature is not None:
                write_signature(record, signature)
            else:  # no signature describes them: none is kept (the next run probes again)
                record.unlink(missing_ok=True)
        bad = _misfits(captions, valid, on_disk, signature, root / KIND / model)
        if bad:  # shards that fitted the stale signature and not the encoders'
            found[0].update(encode(bad, [])[0])
    barrier(ctx)
    if said is not None and ctx.is_main and measurable:  # rank 0 encodes whenever any rank does
        said += [cut] if (cut := cut_note(family.spec, cfg, captions, counts)) else []
    first = DiskConditioning(root, model, keys, found[0], signature)
    first.unwritten = unwritten
    return [first, *found[1:]]


def _form(tensors: Mapping[str, torch.Tensor]) -> Summary:
    """`summarize` of freshly encoded tensors without their values (finite taken as true): what
    a signature says of an encoder's output form (names, dtypes, shapes), whatever one caption's
    values are."""
    return {name: (dtype, shape, True) for name, (dtype, shape, _) in summarize(tensors).items()}


def _tokens(metadata: Mapping[str, object]) -> int | None:
    """The token count a text shard keeps (None: a shard from before the counts were kept, or a
    value that is not 1 to 9 ASCII digits: the metadata is outside the shard's crc32, and
    str.isdigit takes "²", which int() refuses, and int() refuses over 4,300 digits)."""
    value = metadata.get(TOKENS)
    return int(value) if isinstance(value, str) and _COUNT.fullmatch(value) else None


def _misfits(
    captions: Sequence[str],
    valid: set[str],
    on_disk: Mapping[str, Summary],
    signature: Signature | None,
    folder: Path,
) -> list[str]:
    """The captions of `valid` whose shard (its summary in `on_disk`) does not fit `signature`
    (rank 0's view in a data-parallel run), in caption order; logged once, naming one and why."""
    if signature is None:
        return []
    why = {t: misfit(on_disk[t], signature) for t in captions if t in valid and t in on_disk}
    bad = gather_round([t for t in captions if why.get(t)], group_context())[0]
    if bad:
        log.warning(
            "%d cached text embedding(s) in %s do not match what the text encoders give (one: %s): re-encoding them",
            len(bad),
            folder,
            why.get(bad[0]),
        )
    return bad
