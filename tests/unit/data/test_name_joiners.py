"""File and folder names take a joiner that joins as prompts and captions do (data/joiners.py,
paths.hidden_in_name, RELIABILITY 1126), and the web form's copy of the rule (name_rule's
hidden-character check, joiners.joined_regex) leaves exactly the characters `joined` leaves."""

from __future__ import annotations

import itertools
import random
import unicodedata

import pytest
import regex

from lorastudio.data.joiners import joined, joined_regex
from lorastudio.data.kohya import parse_kohya_folder
from lorastudio.data.name_rule import new_name_rule
from lorastudio.data.paths import new_name, safe_component
from lorastudio.errors import ConfigError

ZWNJ, ZWJ = "\u200c", "\u200d"
FLAG = "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f"  # Scotland's


@pytest.mark.parametrize(
    "name",
    [
        f"\u06af\u0644{ZWNJ}\u0647\u0627",  # Persian "flowers", as the Persian keyboard types it
        f"my \u0645\u06cc{ZWNJ}\u062e\u0648\u0627\u0647\u0645 set",
        f"\U0001f469{ZWJ}\U0001f4bb at work",  # woman technologist
        f"\U0001f469\U0001f3fd{ZWJ}\U0001f4bb",  # with a skin tone
        f"\U0001f3f3\ufe0f{ZWJ}\U0001f308",  # rainbow flag
        f"\u0915\u094d{ZWJ}\u0937",  # Devanagari conjunct
        f"{FLAG} trip",
    ],
)
def test_a_joiner_that_joins_is_taken_in_a_name_nfc_kept(name):
    assert new_name(name) == unicodedata.normalize("NFC", name)
    assert new_name(unicodedata.normalize("NFD", name)) == unicodedata.normalize("NFC", name)
    assert _served(name) is None


@pytest.mark.parametrize(
    "name",
    [f"ca{ZWJ}t", f"\u06af\u0644{ZWNJ}", f"{ZWNJ}\u0647", f"\u06af {ZWNJ}\u0647", f"\u06af{ZWNJ}{ZWNJ}\u0647",
     "a\U000e0067\U000e007f", "\U0001f3f4\U000e0067", f"\u0644{ZWNJ}a"],
)  # fmt: skip
def test_a_joiner_that_joins_nothing_is_refused_with_the_reason(name):
    with pytest.raises(ConfigError, match="invisible or text-direction characters .*U\\+(200|E00)"):
        safe_component(name, field="dataset name")
    assert "invisible or text-direction" in (_served(name) or "")


def test_a_kohya_folder_takes_a_joined_word_and_names_a_stray_joiner():
    assert parse_kohya_folder(f"10_\u06af\u0644{ZWNJ}\u0647\u0627").words == f"\u06af\u0644{ZWNJ}\u0647\u0627"
    with pytest.raises(Exception, match="ZERO WIDTH JOINER"):
        parse_kohya_folder(f"10_ca{ZWJ}t")


def test_the_web_rule_leaves_exactly_the_characters_joined_leaves():
    """joined_regex (what the web form runs, flag u) against joiners.joined on every string of
    up to 4 characters over an alphabet of each case's parts, and random longer ones."""
    pattern = regex.compile(joined_regex())
    alphabet = ["a", " ", "\u06af", "\u0644", ZWNJ, ZWJ, "\u094d", "\u0915", "\U0001f469", "\ufe0f", "\u0301",
                "\U0001f3fd", "\U0001f3f4", "\U000e0067", "\U000e007f", "\u2192", "\u202e"]  # fmt: skip
    texts = ["".join(t) for n in range(1, 5) for t in itertools.product(alphabet, repeat=n)]
    rng = random.Random(1126)
    texts += ["".join(rng.choices(alphabet, k=rng.randint(5, 12))) for _ in range(3000)]
    for text in texts:
        assert {m.start() for m in pattern.finditer(text)} == joined(text), ascii(text)


def _served(name: str) -> str | None:
    """The web form's verdict (the served checks, run by `regex` as JavaScript runs them)."""
    name = unicodedata.normalize("NFC", name)
    for check in new_name_rule()["checks"]:
        if regex.search(check["refuse"], name, regex.IGNORECASE if "i" in check["flags"] else 0):
            return check["reason"]
    return None


def test_a_name_is_judged_in_its_nfc_form_as_it_is_stored():
    """RELIABILITY 1164: a kohya folder named on macOS (NFD: "e" + U+0301) was refused for a
    joiner after its "é" that the same name in NFC keeps."""
    composed = f"10_caf\u00e9{ZWJ}\u00df"
    decomposed = unicodedata.normalize("NFD", composed)
    assert parse_kohya_folder(decomposed).repeats == parse_kohya_folder(composed).repeats == 10
