"""The preflight's warning naming the captions that hold a character no text a user gives may
hold (text_rules.visible_text: a control, invisible or text-direction character: U+200B ZERO
WIDTH SPACE, U+202E RIGHT-TO-LEFT OVERRIDE, an ESC sequence; line breaks and tabs are fine). The
edit API refuses such text (RELIABILITY 1033), but a caption file written by hand or a
metadata.jsonl row is read as written (a NUL alone is refused there, captions.read_sidecar): the
model then learns text that no prompt typed from what the UI shows will hold (RELIABILITY 1035).
A warning, not a refusal: a dataset that trained before still trains. Also the resume's warning
naming captions of another trainer's markup it keeps (kept_markup_warning). No torch."""

from __future__ import annotations

from collections.abc import Sequence

from lorastudio.data.captions import unread_markup
from lorastudio.data.items import ImageItem, item_name
from lorastudio.text_rules import TEXT_WHITESPACE, hidden_in_text

SHOWN = 5  # images named in the warning, then "and N more"


def hidden_text_warning(items: Sequence[ImageItem], labels: Sequence[str] = ()) -> str | None:
    """ "N caption(s) hold invisible or text-direction characters ..." naming up to SHOWN images
    (as data.items.item_name with `labels`) and the characters of each; None when none does."""
    found = []
    for item in items:
        hidden = hidden_in_text(item.caption, TEXT_WHITESPACE)  # a joiner that joins is text (1103)
        if hidden:
            found.append(f"{item_name(item, labels)} ({hidden})")
    if not found:
        return None
    return (
        f"{len(found)} caption(s) hold invisible or text-direction characters, trained as written: "
        f"{_listed(found)}; remove them (a bulk caption edit's find takes them) or "
        "the model learns text no prompt holds"
    )


def kept_markup_warning(items: Sequence[ImageItem], labels: Sequence[str] = ()) -> str | None:
    """ "N caption(s) hold another trainer's markup, trained as text ..." naming up to SHOWN
    images and what each holds (captions.unread_markup); None when none does. Only a resume's
    scan keeps such captions (data.scan.scan_dataset's keep_markup: its checkpoint, made before
    they were refused, trained them so; RELIABILITY 1750); a fresh run's refuses them."""
    found = []
    for item in items:
        if (markup := unread_markup(item.caption)) is not None:
            found.append(f"{item_name(item, labels)} ({markup.split(',', 1)[0]})")
    if not found:
        return None
    return (
        f"{len(found)} caption(s) hold another trainer's markup, trained as text as the checkpoint "
        f"trained them: {_listed(found)}; a fresh run refuses them (write [trigger] "
        "for the trigger word's place; put kohya's kept tags first, without |||)"
    )


def _listed(found: Sequence[str]) -> str:
    """The first SHOWN of `found` joined by "; ", then " and N more" for the rest."""
    more = f" and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    return f"{'; '.join(found[:SHOWN])}{more}"
