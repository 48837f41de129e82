"""ai-toolkit's `datasets` list -> `[[datasets]]` entries (no torch).

Each item's folder_path becomes an entry's path; its caption, repeat and regularisation keys the
entry's own; its flips, crops, alpha_mask and resolution are the run's settings here (one value
for every entry: the first item's, the others' named when they differ); its control_path(s) and
mask_path: aitoolkit_pairs.py.
"""

from __future__ import annotations

from typing import Any

from lorastudio.config_import import values
from lorastudio.config_import.aitoolkit_pairs import Pairs, pair_keys, place_pairs, read_entry
from lorastudio.config_import.common import carry, folder
from lorastudio.config_import.report import NOT_NEEDED, NOT_SUPPORTED, Draft

_ENTRY = (  # ai-toolkit key -> entry key, converter
    ("caption_dropout_rate", "caption_dropout", values.number),
    ("shuffle_tokens", "shuffle_tags", values.flag),
    ("token_dropout_rate", "tag_dropout", values.number),
    ("keep_tokens", "keep_tokens", values.integer),
    ("default_caption", "default_caption", values.text),
    ("num_repeats", "repeats", values.integer),
    ("loss_multiplier", "loss_weight", values.number),
    ("is_reg", "regularisation", values.flag),
)
_RUN = (
    ("flip_x", "random_flip", values.flag),
    ("random_crop", "random_crop", values.flag),
    ("alpha_mask", "alpha_mask", values.flag),
)
_REASONS = {
    "cache_latents": f"{NOT_NEEDED}: latents are cached by default (latent_cache auto)",
    "cache_latents_to_disk": f"{NOT_NEEDED}: latent_cache auto caches in memory, or on disk when it is large",
    "flip_y": f"{NOT_SUPPORTED}: only horizontal flips (random_flip)",
    "scale": f"{NOT_SUPPORTED}: images are scaled to their bucket",
    "square_crop": f"{NOT_SUPPORTED}: aspect_buckets = false trains square crops of every image",
    "network_weight": f"{NOT_SUPPORTED}: one adapter strength",
    "buckets": f"{NOT_NEEDED}: aspect_buckets is on by default",
    "bucket_tolerance": f"{NOT_SUPPORTED}: the buckets come from the resolution",
}


def dataset_entries(draft: Draft, peer: str, datasets: Any) -> None:
    """Map ai-toolkit's `datasets` list at `peer` into draft's `datasets` entries."""
    if datasets is None:
        return
    if not isinstance(datasets, list):
        draft.fail(peer, "is not a list of datasets")
        return
    n = 0
    resolutions: list[Any] = []
    pairs: list[Pairs] = []
    for i, item in enumerate(datasets):
        where = f"{peer}[{i}]"
        if not isinstance(item, dict) or "folder_path" not in item:
            draft.drop(where, f"{NOT_SUPPORTED}: a dataset here is a folder (folder_path)")
            continue
        found = folder(draft, f"{where}.folder_path", item["folder_path"])
        if found is None:
            draft.drop(where, f"{NOT_SUPPORTED}: its folder is not carried")
            continue
        draft.set(f"{where}.folder_path", f"datasets.{n}.path", found[0], found[1])
        if pair_keys(item):
            pairs.append(read_entry(draft, where, item, n, found[0]))
        for key, ours, conv in _ENTRY:
            if key in item:
                carry(draft, f"{where}.{key}", item[key], f"datasets.{n}.{ours}", conv)
        if "caption_ext" in item:
            ext = str(item["caption_ext"]).lstrip(".").lower()
            draft.drop(f"{where}.caption_ext", f"{NOT_NEEDED}: captions are <image>.txt" if ext == "txt" else
                       f"{NOT_SUPPORTED}: captions are read from <image>.txt: rename the .{ext} files")  # fmt: skip
        for key, ours, conv in _RUN:
            if key in item:
                if ours in draft.settings and draft.settings[ours] != item[key]:
                    draft.drop(
                        f"{where}.{key}",
                        f"{NOT_SUPPORTED}: {ours} is one setting of the run, set by the first",
                    )
                elif ours not in draft.settings:
                    carry(
                        draft,
                        f"{where}.{key}",
                        item[key],
                        ours,
                        conv,
                        "for every entry (a run setting here)" if n else "",
                    )
                else:
                    draft.fold(f"{where}.{key}", ours, item[key])
        if "resolution" in item:
            resolutions.append((f"{where}.resolution", n, item["resolution"]))
        for key, why in _REASONS.items():
            if key in item:
                draft.drop(f"{where}.{key}", why)
        n += 1
    _resolutions(draft, resolutions, n)
    place_pairs(draft, pairs, n)


def _sides(value: Any) -> int | list[int]:
    """A resolution (a side or a list of sides) as our resolution: each side once, one as an int. Raises values.Skip."""
    sides = value if isinstance(value, list) else [value]
    got = sorted({values.integer(s) for s in sides})
    if not got:
        raise values.Skip("no side given")
    return got[0] if len(got) == 1 else got


def _resolutions(draft: Draft, found: list[tuple[str, int, Any]], entries: int) -> None:
    """One dataset's resolution is the run's; several datasets' are each entry's own."""
    for where, n, value in found:
        ours = "resolution" if entries == 1 else f"datasets.{n}.resolution"
        how = ""
        if isinstance(value, list) and len({repr(v) for v in value}) < len(value):
            how = "the sides once each ([1024, 1024] is 1024: square buckets of one area)"
        carry(draft, where, value, ours, _sides, how)
