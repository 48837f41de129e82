"""The format characters that are part of a free text, not hidden in it (no torch).

data/paths.hidden_characters names the invisible and text-direction characters (category Cf:
zero-width spaces and joiners, bidi marks, the BOM, tags) that a name or a text a user gives may
not hold (text_rules: prompts, captions, trigger words). Some Cf characters are how a script or
an emoji is written, and change what is seen:
- a zero-width joiner or non-joiner that joins: an emoji ZWJ sequence (👩‍💻, 🏳️‍🌈: one glyph, as
  a phone's keyboard types it), a Persian or Urdu word's non-joiner (می‌خواهم), an Indic
  conjunct's or chillu's joiner after a virama (क्‍ष, ന്‍);
- the tags of an emoji flag (🏴 U+E0067 U+E0062 U+E0073 U+E0063 U+E0074 U+E007F: Scotland's; England
  and Wales likewise).
They were refused as "U+200D ZERO WIDTH JOINER", "U+E0067 TAG LATIN SMALL LETTER G" (RELIABILITY
1103). A joiner between Latin letters (`ca\u200dt`), at an end, beside a space or another
joiner, and a tag anywhere else, still are: they shape nothing there. File and folder names
take the same (paths.hidden_in_name, RELIABILITY 1126); the web form's copy of the name rule is
`joined_regex`, a regular expression built from this module's constants that matches where
`joined` does (data/name_rule.py serves it; tests/unit/data/test_name_joiners.py checks both).

Hand-written after RFC 5892's CONTEXTJ rules (ZWJ / ZWNJ after a virama; ZWNJ between joining
letters) and UTS #51's emoji ZWJ and tag sequences, with what `unicodedata` knows (no script,
joining type or Extended_Pictographic property): a joiner joins right after a virama, or between
two non-ASCII letters or symbols, the combining marks, variation selectors and skin tones after
the first skipped.
"""

from __future__ import annotations

import functools
import unicodedata

_JOINERS = frozenset("\u200c\u200d")  # ZERO WIDTH NON-JOINER, ZERO WIDTH JOINER
_SKIN_TONES = range(0x1F3FB, 0x1F400)  # EMOJI MODIFIER FITZPATRICK TYPE-1-2 .. TYPE-6 (category Sk)
_TAG_BASE, _TAG_SPEC, _TAG_END = "\U0001f3f4", (0xE0020, 0xE007E), "\U000e007f"  # an emoji flag's tags
_VIRAMA = 9  # the canonical combining class of a virama (Devanagari U+094D, Malayalam U+0D4D, ...)


def joined(text: str) -> set[int]:
    """The indices of `text`'s format characters that are part of it (module docstring): the
    joiners that join and an emoji flag's tags."""
    found = {i for i, ch in enumerate(text) if ch in _JOINERS and _joins(text, i)}
    return found | _flag_tags(text) if _TAG_BASE in text else found


def _joins(text: str, i: int) -> bool:
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
    """The indices of `text`'s emoji flags' tags: a black flag (U+1F3F4), tags U+E0020-U+E007E,
    a CANCEL TAG (U+E007F)."""
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


@functools.cache
def _viramas() -> str:
    """Every character whose canonical combining class is a virama's, in this Python's Unicode."""
    return "".join(chr(c) for c in range(0x110000) if unicodedata.combining(chr(c)) == _VIRAMA)


def _escaped(ch: str) -> str:
    """`ch` for a JavaScript (flag u) and Python `regex` character class: \\uXXXX in the BMP,
    the character itself above (both read it so; neither reads the other's \\u{...} / \\U)."""
    return f"\\u{ord(ch):04X}" if ord(ch) <= 0xFFFF else ch


def joined_regex() -> str:
    """A regular expression (JavaScript with flag u; Python's `regex` reads it alike) matching at
    each index `joined` gives, the character there consumed: `(?!<joined_regex>)` before a class
    of hidden characters leaves the joined ones (name_rule). Lookbehinds of any length, as both
    engines have: a joiner after a virama; a joiner after a non-ASCII letter or symbol and its
    marks and skin tones, before another; a flag's tags after its black flag and before its
    cancel tag."""
    joiners = "[" + "".join(_escaped(j) for j in sorted(_JOINERS)) + "]"
    viramas = "[" + "".join(_escaped(v) for v in _viramas()) + "]"
    joinable = r"(?![\x00-\x7F])[\p{L}\p{So}\p{Sm}\p{Cn}]"  # _joinable
    tones = f"{chr(_SKIN_TONES.start)}-{chr(_SKIN_TONES.stop - 1)}"
    tags = f"[{chr(_TAG_SPEC[0])}-{chr(_TAG_SPEC[1])}]"
    return "|".join(
        (
            f"(?<={viramas}){joiners}",
            f"(?<={joinable}[\\p{{M}}{tones}]*){joiners}(?={joinable})",
            f"(?<={_TAG_BASE}{tags}*){tags}(?={tags}*{_TAG_END})",
            f"(?<={_TAG_BASE}{tags}+){_TAG_END}",
        )
    )
