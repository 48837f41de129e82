"""Which files of a run this version reads otherwise than the versions before session 27's pixel
fixes (no torch): what the run identity's `pixel_rule` record rests on
(training/resume/identity_rules.py).

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

Two of session 32 (pixel rule 3, training/resume/identity_rules.py):

- 1036: an image (or control, or mask) enlarged to cover its bucket beyond data.crop.WINDOW_AREA
  times the bucket's area is cut from its crop's window (`crop.windowed`), its pixels within 2
  levels of the whole resize's;
- 1038: a 2- or 4-bit grey PNG with a colour key trains its keyed pixels transparent, where its
  key (unscaled by Pillow) matched none. Such an item's latent key takes the new pixel rule too.

Decided from what is cheap: the scan's control and target sizes (`data.crop.same_shape`) and each
file's header (`image_headers`: the colour type, a tRNS chunk, an alpha flag); no pixel is decoded.
So it is a file that MAY read otherwise: an RGBA mask opaque everywhere, or a colour key no pixel
holds, counts too (a resume refused that would have continued exactly, never a silent change).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from lorastudio.data.crop import resized_size, same_shape, windowed
from lorastudio.data.image_headers import PNG_SIGNATURE, header_info, png_colour_key
from lorastudio.data.images import DECODE_RULES, PIXEL_RULES, has_transparency, open_image
from lorastudio.data.items import DatasetScan, ImageItem, item_name
from lorastudio.data.safe_open import FolderId, open_in_folder

CONTROL_CUT = "550"  # the fixes' RELIABILITY numbers: the keys of `read_otherwise`
MASK_ALPHA = "552"
COLOUR_KEY = "553"
WINDOW_CROP = "1036"
LOW_BIT_KEY = "1038"
_LOW_BIT_DEPTHS = (2, 4)  # the grey PNG bit depths whose colour key fix 1038 scales


def cut_changed(control: tuple[int, int], target: tuple[int, int], bucket: tuple[int, int]) -> bool:
    """Whether RELIABILITY 550 changed how a control of size `control` (width, height) is cut with
    its target of size `target` in `bucket` (controls taking their target's bucket): the older
    code cut it with its target's crop only when its cover size was its target's to the pixel,
    this one whenever it has its target's shape (`same_shape`)."""
    resized = resized_size(*target, bucket)
    return (resized_size(*control, bucket) == resized) != same_shape(control, resized)


def read_otherwise(scan: DatasetScan) -> dict[str, str]:
    """For each of the fixes 550, 552, 553, 1036 and 1038 (the keys, as strings) that changes how
    this version reads a file of `scan`: the first such file, as reports name it (the target's
    `item_name`; a control or mask "<target>: control <folder>/<file>", "<target>: mask
    masks/<file>"). {} for a scan with none: its run reads every pixel as the older code did.
    Raises DatasetError when a file can no longer be opened (removed, or replaced by a link)."""
    labels = scan.labels()
    found: dict[str, str] = {}
    for item in scan.items:  # every resolution's copy: a control's cut depends on the bucket
        if WINDOW_CROP not in found:
            window = _windowed_file(item)
            if window is not None:
                found[WINDOW_CROP] = item_name(item, labels) + window
        if CONTROL_CUT in found or item.control_sizes:
            continue
        for path, size in zip(item.controls, item.control_dims, strict=False):
            if cut_changed(size, (item.width, item.height), item.bucket):
                found[CONTROL_CUT] = f"{item_name(item, labels)}: control {path.parent.name}/{path.name}"
                break
    for name, path, folder_id, is_mask in _files(scan.images(), labels):
        keyed = (COLOUR_KEY not in found or LOW_BIT_KEY not in found) and colour_keyed(path, folder_id)
        if keyed and COLOUR_KEY not in found:
            found[COLOUR_KEY] = name
        if keyed and LOW_BIT_KEY not in found and _low_bit_grey(path, folder_id):
            found[LOW_BIT_KEY] = name
        if is_mask and MASK_ALPHA not in found and _transparent(path, folder_id):
            found[MASK_ALPHA] = name
        if COLOUR_KEY in found and MASK_ALPHA in found and LOW_BIT_KEY in found:
            break
    return dict(sorted(found.items(), key=lambda kv: int(kv[0])))


def _windowed_file(item: ImageItem) -> str | None:
    """ "" when the item's image (and its mask: the image's size) is cut from a window
    (`crop.windowed`, fix 1036), ": control <folder>/<file>" when one of its controls is; None
    when none is. Controls sized by their pipeline (`control_sizes`) are not cut by cover_crop."""
    size = (item.width, item.height)
    resized = resized_size(*size, item.bucket)
    if windowed(size, resized, item.bucket):
        return ""
    if item.control_sizes:
        return None
    for path, control in zip(item.controls, item.control_dims, strict=False):
        cover = resized if same_shape(control, resized) else resized_size(*control, item.bucket)
        if windowed(control, cover, item.bucket):
            return f": control {path.parent.name}/{path.name}"
    return None


def _low_bit_grey(path: Path, folder_id: FolderId | None) -> bool:
    """Whether `path` is a 2- or 4-bit grey PNG (its IHDR): with a colour key, a file fix 1038
    reads otherwise."""
    with open_in_folder(path, folder_id) as fh:
        head = fh.read(26)
    return (
        head[:8] == PNG_SIGNATURE and head[12:16] == b"IHDR" and head[25] == 0 and head[24] in _LOW_BIT_DEPTHS
    )


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
    control is colour-keyed (fixes 553 and 1038 read its pixels otherwise) or cut from a window
    (fix 1036), else images.DECODE_RULES, the rule every key had before, so an upgrade
    re-encodes only what it reads otherwise."""
    if _windowed_file(item) is not None:
        return PIXEL_RULES
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
