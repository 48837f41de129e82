"""A name's control characters (ESC, CR, BEL, tab, a bidi override) are escaped visibly in every
line the CLI prints (cli/safe_output.py): before, a piped `datasets list` wrote them raw (a tab
shifted the TSV's columns, an OSC sequence reached whoever displayed it) and plain lines such as
"deleted dataset NAME" did so on a terminal too."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console
from tests.cli_runner import run_cli_streams

from lorastudio.cli.tables import print_table

HOSTILE = "ds\x1b]0;owned\x07\r\tx\u202ey\x9b2J\x7f"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]")  # what no line may hold (but \n, \t)


def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    (home / "datasets" / HOSTILE).mkdir(parents=True)
    monkeypatch.setenv("LORASTUDIO_HOME", str(home))
    return home


def test_piped_dataset_list_escapes_a_names_controls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _home(tmp_path, monkeypatch)
    code, out, err = run_cli_streams(capsys, monkeypatch, "datasets", "list")
    assert code == 0, err
    assert not RAW.search(out + err), out + err
    rows = [line.split("\t") for line in out.splitlines() if "\\x1b" in line and "\t" in line]
    assert rows and len(rows[0]) == 4  # the name's tab did not add a column
    assert rows[0][0] == "ds\\x1b]0;owned\\x07\\r\\tx\\u202ey\\u009b2J\\u007f"


def test_a_plain_line_escapes_a_names_controls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = _home(tmp_path, monkeypatch)
    code, out, err = run_cli_streams(capsys, monkeypatch, "datasets", "delete", "--yes", "--", HOSTILE)
    assert not RAW.search(out + err), (code, out + err)
    assert "\\x1b]0;owned\\x07" in out + err
    assert code != 0 or not (home / "datasets" / HOSTILE).exists()


def test_terminal_keeps_styling_but_not_a_names_escapes() -> None:
    from lorastudio.cli.safe_output import escape_output, shown

    styled = "\x1b[31merror:\x1b[0m " + HOSTILE + "\n"
    kept = escape_output(styled, terminal=True)
    assert kept.startswith("\x1b[31merror:\x1b[0m ds\\x1b]0;owned\\x07\\r\tx\\u202ey\\u009b2J\\u007f")
    assert escape_output(styled, terminal=False).startswith("\\x1b[31merror:")
    assert shown("a\tb\nc") == "a\\tb\\nc"
    # a progress bar's redraw passes on a terminal while a live display draws, and only then (a
    # name's cursor-up + erase-line rewrote the line before it: RELIABILITY 2233); a screen clear
    # or a status report never
    redraw = "\r\x1b[2K\x1b[1A\x1b[2K\x1b[?25l\x1b[12G"
    assert escape_output(redraw, terminal=True, live=True) == redraw
    assert escape_output(redraw, terminal=True) == redraw.replace("\x1b", "\\x1b").replace("\r", "\\r")
    for live in (True, False):
        assert (
            escape_output("\x1b[2J\x1b[6n\x1b[?1049h", terminal=True, live=live)
            == "\\x1b[2J\\x1b[6n\\x1b[?1049h"
        )


def test_a_names_cursor_moves_pass_a_terminal_only_inside_the_live_display() -> None:
    """A file named `c<ESC>[1A<ESC>[2Kd.png` in a refusal printed on a terminal moved the cursor
    up and erased the line before (`train --check`); only the train display's own redraw may."""
    from lorastudio.cli.run_display import ProgressDisplay
    from lorastudio.cli.safe_output import EscapingStream

    tty = _Tty()
    stream = EscapingStream(tty)
    name = "c\x1b[1A\x1b[2Kd.png"
    stream.write(f"\x1b[31merror: {name}: corrupt\x1b[0m\n")
    assert tty.getvalue() == "\x1b[31merror: c\\x1b[1A\\x1b[2Kd.png: corrupt\x1b[0m\n"
    console = Console(file=stream, width=100, force_terminal=True, log_path=False)
    with ProgressDisplay(console=console) as display:
        assert display.live
        stream.write("\r\x1b[2K\x1b[1A")  # the live bars' redraw, as rich writes it
        assert tty.getvalue().endswith("\r\x1b[2K\x1b[1A")  # passed as it is
    tail = len(tty.getvalue())
    stream.write(name)  # the display over: a name's moves escaped again
    assert tty.getvalue()[tail:] == "c\\x1b[1A\\x1b[2Kd.png"


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_terminal_table_escapes_a_cells_controls() -> None:
    from lorastudio.cli.safe_output import EscapingStream

    tty = _Tty()
    console = Console(file=EscapingStream(tty), width=200, force_terminal=True, color_system=None)
    print_table(("name", "n"), [[HOSTILE, "1"]], keep=("name",), console=console)
    assert "ds\\x1b]0;owned\\x07\\r" in tty.getvalue()
    assert not RAW.search(tty.getvalue().replace("\x1b[", "")), repr(tty.getvalue())
