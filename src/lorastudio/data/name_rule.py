"""data.paths.new_name's rules as data for the web form (/api/info's `dataset_name_rule`), so
the new-dataset field refuses what the server refuses, with its reason, and accepts what it
accepts (any script: "café", "猫"), holding no copy of the rules.

The rule is a list of checks, each a JavaScript regular expression a refused name matches
(`refuse`, with its `flags`; the name is NFC-normalised first, as new_name does) and the
server's reason (`{name}` stands for the name in quotes), plus the UTF-8 length limit. It is
built from the constants new_name uses; tests/unit/data/test_name_rule.py checks that it
refuses exactly the names new_name refuses. Its hidden-character check leaves a joiner that joins
(a Persian word's non-joiner, an emoji's ZWJ sequence) by data/joiners.joined_regex, the web's
form of joiners.joined: lookbehinds, which JavaScript (flag u) and Python's `regex` both read.
No torch here.
"""

from __future__ import annotations

import re
from typing import Any

from lorastudio.data import paths
from lorastudio.data.joiners import joined_regex


def _checks() -> list[tuple[str, str, str]]:
    """(refuse, flags, reason) in new_name's order (its messages, the field's name left out)."""
    reserved = "|".join(re.escape(n) for n in sorted(paths._RESERVED_NAMES))
    forbidden = "".join(sorted(paths._FORBIDDEN_CHARS))
    separators = "".join(re.escape(s) for s in paths._SEPARATORS)
    hidden = "".join(rf"\p{{{c}}}" for c in sorted(paths._HIDDEN_CATEGORIES))
    limit = paths.MAX_COMPONENT_LENGTH
    return [
        ("^$", "", "must not be empty"),
        (r"\x00", "", "must not contain a NUL character"),
        (r"[\uD800-\uDFFF]", "u", "must be valid UTF-8 text (it holds a lone surrogate / undecodable bytes)"),
        (r"^\.\.?$", "", "{name} is not allowed (it names a folder, not a new one)"),
        (f"[{separators}]", "", "{name} must be a single name without '/' or '\\'"),
        (rf"^[\s\S]{{{limit + 1},}}$", "u", f"must be at most {limit} characters"),
        (r"[\x00-\x1F\x7F]", "", "must not contain control characters"),
        (
            f"(?!{joined_regex()})[{hidden}]",  # but a joiner that joins (paths.hidden_in_name)
            "u",
            "must not contain invisible or text-direction characters: they disguise the name",
        ),
        (f"[{forbidden}]", "", f"must not contain any of {' '.join(forbidden)}"),
        (r"^\.", "", "{name} must not start with '.' (hidden names are not allowed)"),
        (r"^\s|\s$", "u", "{name} must not start or end with whitespace"),
        (r"\.$", "", "{name} must not end with '.'"),
        (
            rf"^(?:{reserved}) *(?:\.|$)",
            "iu",
            "{name} is a reserved device name on Windows; pick another name",
        ),
        (
            "^-",
            "",
            "{name} must not start with '-': a command line would read it as an option; pick another name",
        ),
    ]


def new_name_rule() -> dict[str, Any]:
    """/api/info's `dataset_name_rule` (api.schemas.NameRuleOut): {"checks": [{refuse, flags,
    reason}], "max_bytes", "bytes_reason"}: a name (NFC) is refused with the reason of the first
    check whose `refuse` matches, else when its UTF-8 form is longer than max_bytes."""
    return {
        "checks": [{"refuse": r, "flags": f, "reason": why} for r, f, why in _checks()],
        "max_bytes": paths.MAX_COMPONENT_BYTES,
        "bytes_reason": f"must be at most {paths.MAX_COMPONENT_BYTES} bytes in UTF-8 (file systems allow 255)",
    }
