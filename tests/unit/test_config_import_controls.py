"""`lorastudio config import` of an ai-toolkit edit job: its dataset's control folders
(`control_path`, a folder or a list, and the UI's `control_path_1` .. `_3`) become control_dirs
in slot order; a text-to-image family refuses them by name; several datasets keep them out."""

from __future__ import annotations

from pathlib import Path

from lorastudio.config_import import import_config

JOB = """job: extension
config:
  name: edit
  process:
    - type: sd_trainer
      datasets:
{datasets}
      train: {{steps: 10}}
      model: {{name_or_path: /models/kontext, arch: {arch}}}
"""


def _job(tmp_path: Path, datasets: str, arch: str = "flux_kontext") -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(JOB.format(datasets=datasets, arch=arch))
    return path


def _lines(result) -> dict[str, tuple[str, str | None]]:
    return {line.peer: (line.outcome, line.ours) for line in result.lines if "control" in line.peer}


def test_an_ai_toolkit_control_path_becomes_control_dirs(tmp_path):
    """control_path was named "not carried: set control_dirs by hand" (Known problems until
    session 36): an edit job imported as a text-to-image run of its targets."""
    one = "        - {folder_path: /d/t, control_path: [/d/a, /d/b], control_path_3: /d/c}"
    result = import_config(_job(tmp_path, one))
    assert result.settings["control_dirs"] == ["/d/a", "/d/b", "/d/c"]
    assert _lines(result) == {
        "config.process[0].datasets[0].control_path[0]": ("carried", "control_dirs[0]"),
        "config.process[0].datasets[0].control_path[1]": ("carried", "control_dirs[1]"),
        "config.process[0].datasets[0].control_path_3": ("carried", "control_dirs[2]"),
    }
    flux = import_config(_job(tmp_path, "        - {folder_path: /d/t, control_path: /d/a}", arch="flux"))
    assert "control_dirs" not in flux.settings
    [(outcome, _)] = _lines(flux).values()
    assert outcome == "not carried"
    two = "        - {folder_path: /d/t, control_path: /d/a}\n        - {folder_path: /d/u}"
    assert "control_dirs" not in import_config(_job(tmp_path, two)).settings
