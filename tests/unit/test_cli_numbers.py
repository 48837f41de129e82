"""Out-of-range numbers on the command line (session 25 CLI audit), through the console entry
point in this process: `cache prune --max-gb inf` was an OverflowError traceback (int(inf));
`runs list --limit 10^23` one too (SQLite takes 64-bit integers)."""

from __future__ import annotations

from cli_runner import run_cli


def test_an_infinite_cache_cap_is_refused_like_the_setting(capsys, monkeypatch) -> None:
    """The bound is named in typer's words, which vary: "Input should be less than or equal to
    1000000" (0.29+, pydantic's, as the setting's), "inf is not in the range 0<=x<=1000000" before."""
    code, out = run_cli(capsys, monkeypatch, "cache", "prune", "--max-gb", "inf")
    assert code == 2 and "--max-gb" in out and "1000000" in out, out
    assert "Traceback" not in out


def test_a_huge_run_limit_lists_every_run(capsys, monkeypatch) -> None:
    code, out = run_cli(capsys, monkeypatch, "runs", "list", "--limit", str(10**23))
    assert (code, out) == (0, "no runs yet"), out
