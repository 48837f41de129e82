"""Which files of a run this version reads otherwise than the versions before session 27's pixel
fixes (no torch): what the run identity's `pixel_rule` record rests on
(training/identity_rules.py).

Three fixes changed what a run trains on without changing any file or setting:

- 550: a control of its target's shape up to pixel rounding whose cover size is not its target's
  (a half-size copy) is cut with its target's crop and flip, not centre-cropped; only where
  controls take their target's bucket (`ImageItem.control_sizes` empty: control_resolution
  "target");
- 552: a masks/ file with transparency (an alpha channel, a palette's transparent index, a colour
  key) weighs its transparent pixels as black, not as white;
- 553: a grey or RGB PNG with a colour key (tRNS) trains its keyed pixels transparent (composited
  onto white), not in their stored colour. Only such an image's (or control's) latent cache key
  takes the new pixel rule (`decode_rule`): every other image keeps its shards.

Decided from what is cheap: the scan's control and target sizes (`data.crop.same_shape`) and each
file's header (`image_headers`: the colour type, a tRNS chunk, an alpha flag); no pixel is decoded.
So it is a file that MAY read otherwise: an RGBA mask opaque everywhere, or a colour key no pixel
holds, counts too (a resume refused that would have continued exactly, never a silent change).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from lorastudio.data.crop import resized_size, same_shape
from lorastudio.data.image_headers import header_info, png_colour_key
from lorastudio.data.images import DECODE_RULES, PIXEL_RULES, has_transparency, open_image
from lorastudio.data.items import DatasetScan, ImageItem, item_name
from lorastudio.data.safe_open import FolderId, open_in_folder

CONTROL_CUT = "550"  # the fixes' RELIABILITY numbers: the keys of `read_otherwise`
MASK_ALPHA = "552"
COLOUR_KEY = "553"


def cut_changed(control: tuple[int, int], target: tuple[int, int], bucket: tuple[int, int]) -> bool:
    """Whether RELIABILITY 550 changed how a control of size `control` (width, height) is cut with
    its target of size `target` in `bucket` (controls taking their target's bucket): the older
    code cut it with its target's crop only when its cover size was its target's to the pixel,
    this one whenever it has its target's shape (`same_shape`)."""
    resized = resized_size(*target, bucket)
    return (resized_size(*control, bucket) == resized) != same_shape(control, resized)


def read_otherwise(scan: DatasetScan) -> dict[str, str]:
    """For each of the fixes 550, 552 and 553 (the keys, as strings) that changes how this
    version reads a file of `scan`: the first such file, as reports name it (the target's
    `item_name`; a control or mask "<target>: control <folder>/<file>", "<target>: mask
    masks/<file>"). {} for a scan with none: its run reads every pixel as the older code did.
    Raises DatasetError when a file can no longer be opened (removed, or replaced by a link)."""
    labels = scan.labels()
    found: dict[str, str] = {}
    for item in scan.items:  # every resolution's copy: a control's cut depends on the bucket
        if CONTROL_CUT in found or item.control_sizes:
            continue
        for path, size in zip(item.controls, item.control_dims, strict=False):
            if cut_changed(size, (item.width, item.height), item.bucket):
                found[CONTROL_CUT] = f"{item_name(item, labels)}: control {path.parent.name}/{path.name}"
                break
    for name, path, folder_id, is_mask in _files(scan.images(), labels):
        if COLOUR_KEY not in found and colour_keyed(path, folder_id):
            found[COLOUR_KEY] = name
        if is_mask and MASK_ALPHA not in found and _transparent(path, folder_id):
            found[MASK_ALPHA] = name
        if COLOUR_KEY in found and MASK_ALPHA in found:
            break
    return dict(sorted(found.items()))


def _files(
    items: list[ImageItem], labels: tuple[str, ...]
) -> Iterator[tuple[str, Path, FolderId | None, bool]]:
    """(name, path, folder identity, is a masks/ file) of each file the items read, once each."""
    seen: set[Path] = set()
    for item in items:
        target = item_name(item, labels)
        files = [(target, item.path, item.folder_id, False)]
        ids = item.control_folder_ids or (None,) * len(item.controls)
        files += [
            (f"{target}: control {p.parent.name}/{p.name}", p, folder, False)
            for p, folder in zip(item.controls, ids, strict=False)
        ]
        if item.mask is not None and not item.mask.alpha:  # alpha: the image's own (its file above)
            mask = item.mask.path
            files.append((f"{target}: mask {mask.parent.name}/{mask.name}", mask, item.mask.folder_id, True))
        for file in files:
            if file[1] not in seen:
                seen.add(file[1])
                yield file


def colour_keyed(path: Path, folder_id: FolderId | None) -> bool:
    """Whether `path` is a grey or RGB PNG with a colour key (its header; Pillow's header-only open
    where the header cannot tell): a file whose pixels fix 553 reads otherwise."""
    with open_in_folder(path, folder_id) as fh:
        keyed = png_colour_key(fh)
    if keyed is not None:
        return keyed
    with open_image(path, folder_id) as img:
        return img.mode != "P" and "transparency" in img.info


def decode_rule(item: ImageItem) -> str:
    """The pixel rule of an item's latent cache key: images.PIXEL_RULES where its image or a
    control is colour-keyed (fix 553 reads its pixels otherwise), else images.DECODE_RULES, the
    rule every key had before, so an upgrade re-encodes only what it reads otherwise."""
    ids = item.control_folder_ids or (None,) * len(item.controls)
    files = [(item.path, item.folder_id), *zip(item.controls, ids, strict=False)]
    return PIXEL_RULES if any(colour_keyed(path, folder) for path, folder in files) else DECODE_RULES


def _transparent(path: Path, folder_id: FolderId | None) -> bool:
    """Whether the mask file `path` has transparency (its header's alpha flag; Pillow's header-only
    open where the header cannot tell)."""
    with open_in_folder(path, folder_id) as fh:
        info = header_info(fh)
    if info is not None and info.alpha is not None:
        return info.alpha
    with open_image(path, folder_id) as img:
        return has_transparency(img)
