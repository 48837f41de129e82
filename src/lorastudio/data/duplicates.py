"""Images a run would train on twice: the same file content under two names (no torch, no HTTP).

A dataset gathered from the web or merged from two folders often holds one image twice
(`photo.jpg` and `photo (1).jpg`, or a kohya training folder and its regularisation folder
sharing a picture). Each copy is sampled on its own, so that image trains twice as often as the
others: not wrong in itself (some users repeat an image on purpose), never silent either. The
preflight names each group of copies (the same bytes: `ImageItem.sha256`, with the same controls
for a paired dataset, whose one target may rightly come with several controls).
"""

from __future__ import annotations

from collections.abc import Sequence

from lorastudio.data.items import ImageItem, item_name

NAMED_GROUPS = 10  # groups named in the warning; the rest are counted


def duplicate_groups(items: list[ImageItem], labels: Sequence[str] = ()) -> list[list[str]]:
    """The names (data.items.item_name with `labels`) of each group of two or more images whose
    bytes (and controls' bytes) are the same, each group sorted, the groups in name order. An
    image trained at several resolutions counts once; items without a recorded sha256 are
    left out."""
    by_content: dict[tuple[str, tuple[str, ...]], set[str]] = {}
    for item in items:
        if item.sha256:
            by_content.setdefault((item.sha256, item.control_sha256), set()).add(item_name(item, labels))
    return sorted(sorted(names) for names in by_content.values() if len(names) > 1)


def duplicate_warning(items: list[ImageItem], labels: Sequence[str] = ()) -> str | None:
    """The preflight line naming the groups of identical images (the first NAMED_GROUPS and a
    count of the others), or None when there are none."""
    groups = duplicate_groups(items, labels)
    if not groups:
        return None
    named = "; ".join(" = ".join(group) for group in groups[:NAMED_GROUPS])
    more = f"; and {len(groups) - NAMED_GROUPS} more group(s)" if len(groups) > NAMED_GROUPS else ""
    copies = sum(len(group) for group in groups)
    return (
        f"{copies} image(s) are copies of another (the same file content under other names): {named}{more}; "
        "each copy trains as an image of its own (that picture more often than the others): delete the "
        "copies unless that is meant"
    )
