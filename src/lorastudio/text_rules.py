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

A zero-width joiner or non-joiner that joins (an emoji ZWJ sequence, a Persian word's non-joiner,
an Indic joiner after a virama) and an emoji flag's tags are part of the text (data/joiners.py,
RELIABILITY 1103).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from lorastudio.data.joiners import joined
from lorastudio.data.paths import hidden_characters

TEXT_WHITESPACE = "\n\t"  # the control characters a multi-line text may hold (not \r: it rewinds a line)


def hidden_in_text(text: str, allowed: str = "") -> str:
    """The hidden characters of the free text `text` (data/paths.hidden_characters' names), but
    those in `allowed` (TEXT_WHITESPACE for a multi-line text) and the format characters that
    are part of the text (data/joiners.joined: an emoji's or a Persian word's joiner, an emoji
    flag's tags); "" when it has none."""
    return hidden_characters(text, allowed, joined(text))


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
# A trigger word and a default caption with their lengths checked as a string's ("String should
# have at most 200 characters"): a max_length on the field beside the validator's type was checked
# as a sequence's, "Value should have at most 200 items after validation, not 5000" (session 36).
TriggerWord = Annotated[str, Field(max_length=200), AfterValidator(one_line)]
DefaultCaption = Annotated[str, Field(max_length=2000), AfterValidator(visible_text)]
