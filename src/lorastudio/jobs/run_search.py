"""GET /api/runs' `q` (session 37 kpfix6): which runs a search keeps, as a SQLite function the
run store's page query calls, so that the rowid cursor pages the matches as it pages every run
(a run made or deleted between two pages repeats or skips none) and `total` counts the matches.

A run is kept when every word of the query (split on white space; NFC, any case, as the web's
NameFilter matches a name) is found in its output name, its id or its config's base_model. The
config is parsed only for a word the name and id lack and its text holds (a config text with no
backslash writes every string as it is, so a word missing from the whole text is in no value of
it: ~0.1 ms a row saved on a full scan). No torch.
"""

from __future__ import annotations

import sqlite3
import unicodedata
from functools import lru_cache

from lorastudio import json_read

SQL_FUNCTION = "run_matches"  # run_matches(query, id, output_name, config_json) -> 0 / 1


@lru_cache(maxsize=64)
def query_words(query: str) -> tuple[str, ...]:
    """The words of `query` as they are compared: NFC, casefolded; () for a blank query."""
    return tuple(unicodedata.normalize("NFC", query).casefold().split())


def _folded(text: object) -> str:
    return unicodedata.normalize("NFC", text).casefold() if isinstance(text, str) else ""


def _base_model(config_json: object) -> str:
    """The run config's base_model ("" where the config is unreadable or names none)."""
    if not isinstance(config_json, str):
        return ""
    try:
        config = json_read.loads(config_json)
    except ValueError:
        return ""
    return _folded(config.get("base_model")) if isinstance(config, dict) else ""


def run_matches(query: object, run_id: object, output_name: object, config_json: object) -> int:
    """1 when every word of `query` is in the run's output name, id or base_model, else 0 (1 for
    a blank query). Never raises: SQLite would fail the whole page for one odd row."""
    words = query_words(query) if isinstance(query, str) else ()
    have = f"{_folded(output_name)}\n{_folded(run_id)}"
    missing = [w for w in words if w not in have]
    if not missing:
        return 1
    if isinstance(config_json, str) and "\\" not in config_json:  # every string in it as written
        text = _folded(config_json)  # holds the folded base_model whole: a word it lacks is in no value
        if any(w not in text for w in missing):
            return 0
    base = _base_model(config_json)
    return int(all(w in base for w in missing))


def register(conn: sqlite3.Connection) -> None:
    """Make SQL_FUNCTION callable in `conn`'s queries."""
    conn.create_function(SQL_FUNCTION, 4, run_matches, deterministic=True)
