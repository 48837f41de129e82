"""Names' control characters never reach the reader raw: every line the CLI prints.

A dataset, image, run, model or LoRA name may hold ESC, CR, BEL, a tab, a bidi override (U+202E,
which reverses what follows on screen) and so on; printed as they are, they shift a TSV's
columns, rewrite a line (CR), or drive the terminal (ESC sequences). The commands print names in
~100 places (tables, "removed NAME" lines, warnings), so the escape is made once, where every
one of them passes: main() swaps sys.stdout and sys.stderr for an EscapingStream for the command's
life (`escaped_output`). It writes each such character visibly: `\\x1b` for a C0 control (`\\r`, `\\t` by name),
`\\u202e` for DEL, a C1 control or a format character (a JSON string's own escape, so a document
stays valid; `--json` output is ASCII anyway). Newline and tab pass (a table's tab separators and
lines; print_table escapes a tab inside a cell itself, with `shown`).

On a terminal the CLI's own styling (click's coloured "error:" lines, rich's tables and progress
bars) is made of a few CSI sequences (colour, a progress bar's cursor moves and line erase) and
CR: colour (SGR) passes there (_TERMINAL_STYLE), the redraw's cursor moves, line erase and CR
only while a live display draws (`live_display`, the `train` progress bars: _TERMINAL); every
other ESC (a screen clear, a status report, an OSC: a window title, a hyperlink, the clipboard)
and control character is escaped. (The redraw passed at any time: a file named
`c\x1b[1A\x1b[2Kd.png` in a dataset's refusal moved up a line and erased the one before it on
screen, RELIABILITY 2233.) Piped or
redirected, nothing styles the output (click and rich colour a terminal only): everything is
escaped. Bytes written to a stream's `.buffer` bypass it (no command writes names as bytes).

rich reads the text it prints as markup and emoji codes by default: a name inside an f-string
(`warning: {message}`, `launching ... {config path}`) that held `[/x]` raised MarkupError (the
`train` display's warning of a run ended the command), `[bold]` was eaten and `[link=...]` made a
hyperlink; `:warning:` became an emoji. `plain_console` is the CLI's Console: it takes no markup
or emoji codes; a line is coloured by `style=` (RELIABILITY 2232).
"""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from rich.console import Console

# C0 controls but newline and tab, DEL, C1 controls, and the format characters that reorder or
# separate text on screen: bidi marks, embeddings, overrides and isolates, line/paragraph separators
_CONTROL = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
_CONTROLS = re.compile(f"[{_CONTROL}]")
_CELL_CONTROLS = re.compile(f"[\t\n{_CONTROL}]")
_LINES_CONTROLS = re.compile(f"[\t{_CONTROL}]")
# on a terminal, what click and rich make of their styling passes: SGR (colour, bold) always
# (_TERMINAL_STYLE), and while a live display draws a progress bar's redraw (rich's Live: cursor
# up / down / to a column, erase in line, cursor hidden or shown) and CR (_TERMINAL); every other
# sequence (a screen clear, a mode change, a status report whose answer the terminal would type
# into the shell, OSC) and control character is escaped
_TERMINAL_STYLE = re.compile(rf"\x1b\[[0-9;]*m|[{_CONTROL}]")
_TERMINAL = re.compile(rf"\x1b\[[0-9;]*m|\x1b\[[0-9]*[ABCDGK]|\x1b\[\?25[hl]|\r|[{_CONTROL}]")
_live_displays = 0  # live displays drawing now (live_display)


_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def plain_console(**kwargs: Any) -> Console:
    """A rich Console (its `kwargs`) that prints every string as the text it is: no markup, no
    emoji codes (colour a line with `style=`)."""
    from rich.console import Console  # rich only for the commands that print with it

    return Console(markup=False, emoji=False, **kwargs)


def _escape(char: str) -> str:
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x20 else f"\\u{code:04x}")


def _sub(match: re.Match[str]) -> str:
    text = match.group()
    return text if len(text) > 1 or text == "\r" else _escape(text)


def _sub_style(match: re.Match[str]) -> str:
    text = match.group()
    return text if len(text) > 1 else _escape(text)


@contextmanager
def live_display() -> Iterator[None]:
    """While inside, the terminal's EscapingStreams pass a live display's redraw (cursor moves,
    line erase, CR) as well as colour; enter it around a rich Live (a Progress) only."""
    global _live_displays
    _live_displays += 1
    try:
        yield
    finally:
        _live_displays -= 1


def shown(text: str, *, lines: bool = False) -> str:
    """`text` with every control character escaped visibly, tab and newline too (newline kept
    with `lines`): one table cell, or one name on one line."""
    pattern = _LINES_CONTROLS if lines else _CELL_CONTROLS
    return pattern.sub(lambda m: _escape(m.group()), text)


def escape_output(text: str, terminal: bool, live: bool | None = None) -> str:
    """`text` as an EscapingStream writes it: newline and tab kept; on a `terminal` colour (SGR)
    kept too, and while a display is `live` (default: inside `live_display`) its redraw's CSI
    sequences and CR; every other control character escaped."""
    if terminal:
        if live if live is not None else _live_displays > 0:
            return _TERMINAL.sub(_sub, text)
        return _TERMINAL_STYLE.sub(_sub_style, text)
    return _CONTROLS.sub(lambda m: _escape(m.group()), text)


class EscapingStream(io.TextIOBase):
    """A text stream that writes to `inner` through `escape_output` (terminal or not, as
    `inner.isatty()` says when made); everything else (flush, fileno, isatty, encoding, buffer)
    is the inner stream's."""

    def __init__(self, inner: TextIO) -> None:
        super().__init__()
        self.inner = inner
        try:
            self._terminal = bool(inner.isatty())
        except (OSError, ValueError):
            self._terminal = False

    def write(self, text: str) -> int:
        self.inner.write(escape_output(text, self._terminal))
        return len(text)

    def writable(self) -> bool:
        return True

    def flush(self) -> None:
        self.inner.flush()

    def isatty(self) -> bool:
        return self._terminal

    def fileno(self) -> int:
        return self.inner.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.inner.encoding

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return self.inner.errors

    def __getattr__(self, name: str) -> Any:  # buffer, name, mode, line_buffering ...
        return getattr(self.inner, name)


@contextmanager
def escaped_output() -> Iterator[None]:
    """sys.stdout and sys.stderr as EscapingStreams inside; the streams of before after (an
    in-process caller, a test, gets its own back)."""
    saved = sys.stdout, sys.stderr
    sys.stdout = EscapingStream(saved[0])  # type: ignore[assignment]
    sys.stderr = EscapingStream(saved[1])  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
