"""A file's bytes as text, or where they stop being UTF-8: the one decoding of the config files a
user gives (cli/config_file.py: lorastudio's run configs; config_import/reading.py: another
trainer's), so both name the first bad byte the same way."""

from __future__ import annotations


def utf8_text(raw: bytes) -> str:
    """`raw` decoded as UTF-8, a leading byte-order mark skipped. Raises ValueError "not UTF-8
    text: byte 0xNN at line L, column C" naming the first byte that is not UTF-8."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        column = err.start - (raw.rfind(b"\n", 0, err.start) + 1) + 1
        raise ValueError(
            f"not UTF-8 text: byte 0x{raw[err.start]:02x} at line {line}, column {column}"
        ) from None
