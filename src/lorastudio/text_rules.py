"""The one rule for free text a user gives that lorastudio writes into captions, files or the UI
(a trigger word, a caption prefix, a class word, a default caption, a prompt): no control,
invisible or text-direction character (NUL, ESC, U+202E RIGHT-TO-LEFT OVERRIDE, a zero-width
joiner, ...: data/paths.hidden_characters), which would give a caption of several lines, a
metadata value cut at a NUL, or a text that reads backwards in the UI and the model card.

Two forms: `one_line` (a trigger word, a prefix, a class word: also no line break or tab) and
`visible_text` (a caption or a prompt, which may be written over several lines: line breaks and
tabs allowed, nothing else). Both raise ValueError naming the characters, so a pydantic
validator reports it under the field's name; `OneLineText` and `VisibleText` are the field types
that apply them (a config field declares `OneLineText | None` rather than a validator of its own).

A zero-width joiner or non-joiner that joins (`hidden_in_text`) is part of the text, not hidden:
an emoji ZWJ sequence (👩‍💻, 🏳️‍🌈: one glyph, as a phone's keyboard types it), a Persian or Urdu
word's non-joiner (می‌خواهم), an Indic conjunct's or chillu's joiner after a virama (क्‍ष, ന്‍).
So are the tags of an emoji flag (🏴 then U+E0067 U+E0062 ... U+E007F: England, Scotland, Wales).
They were refused as "U+200D ZERO WIDTH JOINER", "U+E0067 TAG LATIN SMALL LETTER G" (RELIABILITY 1103). One between Latin letters
(`ca\u200dt`), at an end, beside a space or another joiner still is: it shapes nothing there.
Hand-written after RFC 5892's CONTEXTJ rules (ZWJ / ZWNJ after a virama; ZWNJ between joining
letters) and UTS #51's emoji ZWJ sequences, with what `unicodedata` knows (no script or joining
type): the neighbours are non-ASCII letters or symbols, combining marks and skin tones skipped.
"""

from __future__ import annotations

import unicodedata
from typing import Annotated

from pydantic import AfterValidator

from lorastudio.data.paths import hidden_characters

TEXT_WHITESPACE = "\n\t"  # the control characters a multi-line text may hold (not \r: it rewinds a line)
_JOINERS = frozenset("\u200c\u200d")  # ZERO WIDTH NON-JOINER, ZERO WIDTH JOINER
_SKIN_TONES = range(0x1F3FB, 0x1F400)  # EMOJI MODIFIER FITZPATRICK TYPE-1-2 .. TYPE-6 (category Sk)
_TAG_BASE, _TAG_SPEC, _TAG_END = "\U0001f3f4", (0xE0020, 0xE007E), "\U000e007f"  # an emoji flag's tags
_VIRAMA = 9  # the canonical combining class of a virama (Devanagari U+094D, Malayalam U+0D4D, ...)


def _joins(text: str, i: int) -> bool:
    """Whether the joiner `text[i]` joins (module docstring): right after a virama, or between a
    non-ASCII letter or symbol (combining marks, variation selectors and skin tones after it
    skipped) and a non-ASCII letter or symbol."""
    if i > 0 and unicodedata.combining(text[i - 1]) == _VIRAMA:
        return True
    j = i - 1
    while j >= 0 and (unicodedata.category(text[j])[0] == "M" or ord(text[j]) in _SKIN_TONES):
        j -= 1
    return j >= 0 and i + 1 < len(text) and _joinable(text[j]) and _joinable(text[i + 1])


def _joinable(ch: str) -> bool:
    """A non-ASCII letter or symbol (So; Sm: 🙂‍↔️'s arrow; Cn: an emoji newer than this
    Python's Unicode tables)."""
    category = unicodedata.category(ch)
    return not ch.isascii() and (category[0] == "L" or category in ("So", "Sm", "Cn"))


def _flag_tags(text: str) -> set[int]:
    """The indices of `text`'s emoji tag sequences' tags: a black flag (U+1F3F4), tags
    U+E0020-U+E007E, a CANCEL TAG (U+E007F), as the keyboard's flags of England, Scotland and
    Wales are written (UTS #51)."""
    found: set[int] = set()
    start = text.find(_TAG_BASE)
    while start >= 0:
        end = start + 1
        while end < len(text) and _TAG_SPEC[0] <= ord(text[end]) <= _TAG_SPEC[1]:
            end += 1
        if end > start + 1 and end < len(text) and text[end] == _TAG_END:
            found.update(range(start + 1, end + 1))
        start = text.find(_TAG_BASE, end)
    return found


def hidden_in_text(text: str, allowed: str = "") -> str:
    """The hidden characters of the free text `text` (data/paths.hidden_characters' names), but
    those in `allowed` (TEXT_WHITESPACE for a multi-line text), the joiners that join and an
    emoji flag's tags (module docstring); "" when it has none."""
    tags = _flag_tags(text) if _TAG_BASE in text else set()
    kept = (
        ch
        for i, ch in enumerate(text)
        if ch not in allowed and i not in tags and not (ch in _JOINERS and _joins(text, i))
    )
    return hidden_characters("".join(kept))


def one_line(value: str | None, what: str = "") -> str | None:
    """`value` unchanged when it is one line of visible text (or None).

    Raises: ValueError "<what >must be one line of visible text; it holds U+000A LINE FEED ...".
    """
    hidden = hidden_in_text(value) if value else ""
    if hidden:
        raise ValueError(f"{what + ' ' if what else ''}must be one line of visible text; it holds {hidden}")
    return value


def visible_text(value: str | None, what: str = "") -> str | None:
    """`value` unchanged when it holds no hidden character but line breaks and tabs (or None).

    Raises: ValueError "<what >must be visible text (line breaks allowed); it holds U+0000 ...".
    """
    hidden = hidden_in_text(value, TEXT_WHITESPACE) if value else ""
    if hidden:
        raise ValueError(
            f"{what + ' ' if what else ''}must be visible text (line breaks allowed); it holds {hidden}"
        )
    return value


OneLineText = Annotated[str, AfterValidator(one_line)]  # a trigger word, a class word
VisibleText = Annotated[str, AfterValidator(visible_text)]  # a caption (line breaks allowed)
