"""`lorastudio models rm` beside a server or a CLI run on the same home (RELIABILITY 776): refused
(exit 1, the model kept, the holder named) instead of deleting a model the server's training
job, generation or fetch, or the CLI run, was using (it knew of no running job). Like
`datasets delete`, it holds the home while it deletes; through the server the delete checks
what uses the model (409)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from cli_runner import run_cli
from lorastudio.jobs.homelock import HomeLock
from lorastudio.settings import Settings


@pytest.mark.parametrize("holder", ["server", "train"])
def test_models_rm_is_refused_while_a_server_or_a_run_holds_the_home(
    studio_home: Path,
    tiny_model: Callable[[str], Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    holder: str,
) -> None:
    settings = Settings(home=studio_home).ensure_dirs()
    folder = Path(shutil.copytree(tiny_model("flux"), settings.models_dir / "tiny-flux"))
    take = (
        (lambda: HomeLock.for_server(studio_home, 7865))
        if holder == "server"
        else (lambda: HomeLock.for_cli_run(studio_home))
    )
    with take():
        code, said = run_cli(capsys, monkeypatch, "models", "rm", "tiny-flux", "--yes")
    assert code == 1, said
    assert said.startswith("tiny-flux not deleted: ")
    assert ("port 7865" in said) if holder == "server" else ("lorastudio train" in said), said
    assert (folder / "model_index.json").is_file()

    code, said = run_cli(capsys, monkeypatch, "models", "rm", "tiny-flux", "--yes")  # the home free

    assert code == 0 and said == f"deleted {folder}" and not folder.exists()
