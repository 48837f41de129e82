"""Tables of the CLI's list commands that never cut what a user must copy.

On a terminal: a rich table whose cells wrap or fold at any width (rich's default crops with
"…"), and whose `keep` columns (ids, names, paths) keep their full width on one line while the
other columns give way; a terminal too narrow for that gets one "header  value" line per cell. Piped or redirected (not a terminal): plain tab-separated lines with a
header line, whole values, for scripts and `grep`. A cell's control characters (a name's tab, ESC,
CR, bidi override) are escaped visibly either way (cli/safe_output.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from lorastudio.cli.safe_output import shown

_NARROWEST = 6  # the width below which a wrapped column is no longer readable


def _print_records(headers: Sequence[str], rows: list[list[str]], console: Console) -> None:
    """Each row as "header  value" lines, rows apart: for a terminal too narrow for a table."""
    pad = max(map(len, headers))
    for n, row in enumerate(rows):
        if n:
            console.print()
        for header, cell in zip(headers, row, strict=True):
            console.print(Text(f"{header:<{pad}}  {cell}"), soft_wrap=True)


def print_table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    keep: Iterable[str] = (),
    console: Console | None = None,
) -> None:
    """Print `rows` under `headers` (cells are plain text, never markup); `keep`: the headers of
    the columns that are never wrapped or folded on a terminal."""
    console = console or Console()
    rows = [[str(cell) for cell in row] for row in rows]
    if not console.is_terminal:
        for line in [list(headers), *rows]:  # written as is: rich would expand the tabs
            # a name's tab, ESC, CR ... escaped visibly (shown): one line a row, its columns kept
            console.file.write("\t".join(shown(cell.replace("\n", "; ")) for cell in line) + "\n")
        return
    # a cell's own lines kept; its other control characters escaped (rich keeps a bidi override,
    # expands a tab)
    rows = [[shown(cell, lines=True) for cell in row] for row in rows]
    kept = set(keep)
    widest = [
        max([len(header), *(max(map(len, r[i].split("\n")), default=0) for r in rows)])
        for i, header in enumerate(headers)
    ]
    kept_width = sum(w for h, w in zip(headers, widest, strict=True) if h in kept)
    if kept_width + 3 * len(headers) + 1 + _NARROWEST * (len(headers) - len(kept)) > console.width:
        _print_records(headers, rows, console)  # too narrow for a table that keeps them whole
        return
    table = Table()
    for header, width in zip(headers, widest, strict=True):
        if header in kept:
            table.add_column(header, no_wrap=True, min_width=width, overflow="fold")
        else:
            table.add_column(header, overflow="fold")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    console.print(table)
