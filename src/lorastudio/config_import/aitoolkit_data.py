"""ai-toolkit's `datasets` list -> `[[datasets]]` entries (no torch).

Each item's folder_path becomes an entry's path; its caption, repeat and regularisation keys the
entry's own; its flips, crops and resolution are the run's settings here (one value for every
entry: the first item's, the others' named when they differ). Its control folders (`control_path`,
a folder or a list in slot order, and the web UI's `control_path_1` .. `control_path_3`) are the
run's `control_dirs` where the job has one dataset (control_dirs pairs one dataset's targets);
the strict config then refuses them for a family that takes no control images (the import's
"not carried" line says so).
"""

from __future__ import annotations

from typing import Any

from lorastudio.config_import import values
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
_RUN = (("flip_x", "random_flip", values.flag), ("random_crop", "random_crop", values.flag))
_REASONS = {
    "cache_latents": f"{NOT_NEEDED}: latents are cached by default (latent_cache auto)",
    "cache_latents_to_disk": f"{NOT_NEEDED}: latent_cache auto caches in memory, or on disk when it is large",
    "flip_y": f"{NOT_SUPPORTED}: only horizontal flips (random_flip)",
    "scale": f"{NOT_SUPPORTED}: images are scaled to their bucket",
    "square_crop": f"{NOT_SUPPORTED}: aspect_buckets = false trains square crops of every image",
    "network_weight": f"{NOT_SUPPORTED}: one adapter strength",
    "buckets": f"{NOT_NEEDED}: aspect_buckets is on by default",
    "bucket_tolerance": f"{NOT_SUPPORTED}: the buckets come from the resolution",
    "mask_path": f"{NOT_SUPPORTED} here by the importer: a dataset's masks/ folder holds its masks",
    "alpha_mask": f"{NOT_SUPPORTED} here by the importer: set alpha_mask by hand",
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
    controls: list[tuple[str, Any]] = []  # (peer key, a folder or a list of folders)
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
        controls += [
            (f"{where}.{key}", item[key]) for key in _CONTROL_KEYS if item.get(key) not in (None, "", [])
        ]
        for key, why in _REASONS.items():
            if key in item:
                draft.drop(f"{where}.{key}", why)
        n += 1
    _resolutions(draft, resolutions, n)
    _control_dirs(draft, controls, n)


_CONTROL_KEYS = ("control_path", "control_path_1", "control_path_2", "control_path_3")


def _control_dirs(draft: Draft, found: list[tuple[str, Any]], entries: int) -> None:
    """The control folders of the job's one dataset as control_dirs, in slot order (control_path's
    folders, then control_path_1 .. _3: ai-toolkit's order); with several datasets each is named
    as not carried (control_dirs pairs one dataset)."""
    if entries != 1:
        for peer, _ in found:
            draft.drop(
                peer, f"{NOT_SUPPORTED} with several datasets: control_dirs pairs one dataset's images"
            )
        return
    dirs: list[tuple[str, str, str]] = []  # (peer key, folder, how it changed)
    for peer, value in found:
        for i, one in enumerate(value if isinstance(value, list) else [value]):
            at = f"{peer}[{i}]" if isinstance(value, list) else peer
            if (got := folder(draft, at, one)) is not None:
                dirs.append((at, *got))
    for k, (at, path, how) in enumerate(dirs):
        if k == 0:
            draft.set(at, "control_dirs", [d[1] for d in dirs], how, shown=("control_dirs[0]", path))
        else:
            draft.fold(at, "control_dirs", path, how, label=f"control_dirs[{k}]")


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
