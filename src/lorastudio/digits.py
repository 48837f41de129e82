"""A whole number written as text by someone else (a `--set` path's list index, a CLI option's
side in pixels, a process id in the environment): ASCII digits only, and few enough of them.

`str.isdigit()` is True for "²" (int() then raises ValueError) and for "٣" (int() reads it as 3, a
number no problem path or help text ever names), and int() refuses a text of more than 4,300
digits (sys.get_int_max_str_digits) with a ValueError: each was a traceback past every handler
where the text came with a digit check in front of int() (RELIABILITY 2103). No torch, no I/O.
"""

from __future__ import annotations

MAX_DIGITS = 18  # 10**18 - 1 still fits an int64 (an index, a size, a pid never come near it)


def ascii_digits(text: str) -> bool:
    """Whether `text` is one or more ASCII digits 0-9 and nothing else (no sign, space, "²")."""
    return text.isascii() and text.isdigit()


def whole_number(text: str, max_digits: int = MAX_DIGITS) -> int | None:
    """The int `text` spells in ASCII digits, or None: not only ASCII digits, or more than
    `max_digits` of them (a number past any list, side or id; int() of it may raise)."""
    if not ascii_digits(text) or len(text) > max_digits:
        return None
    return int(text)
