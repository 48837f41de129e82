"""What an installed lorastudio needs is in its package (session 33 packaging audit): the files the
code reads beside its modules are package data, no module reads a file of the checkout around
`src/`, the build backend refuses a wheel without the web UI, `python -m lorastudio` runs the
console program, the build requirement matches the metadata's syntax and the license travels.
The built artefacts' own file lists: tests/unit/test_packaging_artefacts.py (slow)."""

from __future__ import annotations

import glob
import re
import runpy
import sys
import tomllib
import types
from pathlib import Path
from typing import Any

import pytest

import lorastudio
from lorastudio.api.docs_pages import ASSETS_DIR, REDOC_FILES, SWAGGER_FILES

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(lorastudio.__file__).resolve().parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
# `Path(__file__)` [.resolve()] then .parent steps or .parents[N]: where a module reads beside itself
FILE_RELATIVE = re.compile(r"Path\(__file__\)(?:\.resolve\(\))?((?:\.parent)+|\.parents\[(\d+)\])")


def _package_data() -> set[str]:
    """The files under src/lorastudio that pyproject's package-data globs ship (setuptools expands
    them with glob.glob, recursive, hidden names skipped), relative to the package."""
    found: set[str] = set()
    for pattern in PYPROJECT["tool"]["setuptools"]["package-data"]["lorastudio"]:
        found |= {p for p in glob.glob(pattern, root_dir=PACKAGE, recursive=True) if (PACKAGE / p).is_file()}
    return found


def test_every_file_beside_the_modules_is_package_data() -> None:
    """A non-Python file under src/lorastudio that package-data does not name is left out of the
    wheel: an installed studio would miss it. Hidden files (web_dist/.build-stamp, build_web.sh's
    stamp) and READMEs for developers are not read at run time."""
    shipped = _package_data()
    missing = [
        rel
        for path in PACKAGE.rglob("*")
        if path.is_file()
        and path.suffix not in (".py", ".pyc")
        and "__pycache__" not in path.parts
        and not any(part.startswith(".") for part in path.relative_to(PACKAGE).parts)
        and path.name != "README.md"
        and (rel := path.relative_to(PACKAGE).as_posix()) not in shipped
    ]
    assert not missing, f"not in pyproject's [tool.setuptools.package-data]: {missing}"
    assert "py.typed" in shipped


def test_no_module_reads_a_file_of_the_checkout_outside_the_package() -> None:
    """`Path(__file__)` climbing above src/lorastudio reads the checkout (bench/, tests/, web/),
    which an installed package does not have; the web UI is read inside the package, as package data."""
    climbs = []
    for module in PACKAGE.rglob("*.py"):
        depth = len(module.relative_to(PACKAGE).parts)  # .parent steps that stay inside the package
        for match in FILE_RELATIVE.finditer(module.read_text(encoding="utf-8")):
            steps = match.group(1).count(".parent") if match.group(2) is None else int(match.group(2)) + 1
            if steps > depth:
                climbs.append(f"{module.relative_to(PACKAGE)}: {match.group(0)}")
    assert not climbs, climbs
    from lorastudio.api.app import WEB_DIST

    assert WEB_DIST.parent == PACKAGE


def test_the_built_web_ui_is_package_data(tmp_path: Path) -> None:
    """pyproject's globs, as setuptools expands them, take every file of a built UI (checked on a
    stand-in: the checkout's web_dist exists only once scripts/build_web.sh ran)."""
    # build-id.txt: the build's id the server says on /api answers (api/web_build.py, fix 2061)
    ui = [
        "web_dist/index.html",
        "web_dist/build-id.txt",
        "web_dist/assets/index-x.js",
        "web_dist/assets/index-x.css",
    ]
    for rel in ui:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x", encoding="utf-8")
    globs = PYPROJECT["tool"]["setuptools"]["package-data"]["lorastudio"]
    matched = {p for g in globs for p in glob.glob(g, root_dir=tmp_path, recursive=True)}
    assert set(ui) <= matched, matched


def test_python_dash_m_lorastudio_runs_the_console_program(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: "No module named lorastudio.__main__; 'lorastudio' is a package and cannot be
    directly executed" (only `python -m lorastudio.cli` ran)."""
    from lorastudio import import_freeze

    monkeypatch.setattr(sys, "argv", ["lorastudio", "--version"])
    # this process is a test runner, not the console program: nothing frozen, no early exit
    monkeypatch.setattr("lorastudio.cli.app.mark_standalone", lambda: None)
    with pytest.raises(SystemExit) as end:
        runpy.run_module("lorastudio", run_name="__main__", alter_sys=False)
    assert end.value.code in (0, None)
    assert capsys.readouterr().out.strip() == f"lorastudio {lorastudio.__version__}"
    # the module run as the process's main module counts as the console program (import_freeze)
    fake_main = types.ModuleType("__main__")
    fake_main.__spec__ = types.SimpleNamespace(name="lorastudio.__main__")
    monkeypatch.setitem(sys.modules, "__main__", fake_main)
    assert import_freeze._is_console_program()


def test_the_build_requirement_reads_the_metadata_and_the_license_is_shipped() -> None:
    """`license = "Apache-2.0"` (an SPDX expression) and `license-files` need setuptools 77
    (PEP 639): before, `requires = ["setuptools>=68"]` let an offline build with setuptools 68-76
    (`--no-build-isolation`) fail with "`project.license` must be valid exactly by one
    definition"; and no LICENSE file existed, so neither artefact carried the license text."""
    system = PYPROJECT["build-system"]
    floor = next(r for r in system["requires"] if r.startswith("setuptools"))
    assert int(re.fullmatch(r"setuptools>=(\d+).*", floor).group(1)) >= 77, floor
    project = PYPROJECT["project"]
    assert isinstance(project["license"], str)
    for name in project["license-files"]:
        assert "Apache License" in (ROOT / name).read_text(encoding="utf-8"), name
    # the in-tree backend travels in the sdist (MANIFEST.in): a wheel built from it imports it
    backend = Path(*system["backend-path"], system["build-backend"] + ".py")
    assert (ROOT / backend).is_file()
    assert f"include {backend.as_posix()}" in (ROOT / "MANIFEST.in").read_text(encoding="utf-8")


# The lowest version of each dependency the code runs on where the floor was once too low, and
# what needed it: found by installing every declared floor at once (`uv pip install --resolution
# lowest-direct` of pyproject's dependencies) and running the demo, serve, an upload and int8 / nf4
# runs there (session 33 packaging audit, RELIABILITY 1082)
FLOORS = {
    "peft": (
        "0.20",
        "an int8 base: TorchaoLoraLinear for torchao's Int8Tensor (< 0.18: no import on transformers 5)",
    ),
    "torchao": ("0.18", "Int8Tensor and to_nf4 in torchao.quantization (training/planning/quantize.py)"),
    "pydantic": (
        "2.12",
        "Field(exclude_if=...): init_lora left out of a dump while null (config_fields_training.py;"
        " 2.11: in every dump, and TrainConfig's JSON schema raised); 2.11: FieldInfo.get_default("
        "call_default_factory=True) alone (jobs/host_rules.py)",
    ),
    # the whole default suite at the floors (session 36 depfloors2, RELIABILITY 1400-1401)
    "starlette": (
        "1.8",
        "FileResponse._open_file: api/downloads.py sends the file it opened before the headers"
        " (1.6-1.7 opened the path again: a file deleted after the headers was cut after its 200);"
        " 1.7: a malformed multipart body a 400, not python-multipart's error as a 500",
    ),
    "pydantic-settings": ("2.7", "NoDecode (settings.py)"),
    "typer": (
        "0.26",
        "its own copy of click: 0.16-0.25 take the newest click, and from click 8.5 on every"
        " argument's help was gone from --help (RELIABILITY 1471); 0.16: --help with click 8.2+,"
        " which pip takes beside 0.13-0.15 (make_metavar's ctx; RELIABILITY 1202); 0.13: options"
        " typed `Path | None` (0.12: 'Type not yet supported')",
    ),
    "rich": ("13.8", "typer 0.26's own floor (RELIABILITY 1471)"),
    "pillow": ("11", "an image tile's fields by name: a PNG's colour key (data/images.py)"),
    # below these, no install has the declared floors together: diffusers 0.42.0 requires
    # huggingface-hub>=1.32 and safetensors>=0.8, transformers 5.21.0 tokenizers>=0.23.1 (pip's
    # ResolutionImpossible at the floors: scripts/check_deps.sh floors, RELIABILITY 1200)
    "huggingface-hub": ("1.32", "diffusers 0.42.0's own floor (transformers 5.21.0: 1.31)"),
    "tokenizers": ("0.23.1", "transformers 5.21.0's own floor"),
    "safetensors": ("0.8", "diffusers 0.42.0's and transformers 5.21.0's own floor"),
}


def test_each_dependency_floor_is_one_the_code_runs_on() -> None:
    """Before: peft>=0.17, torchao>=0.14, pydantic>=2.7, pydantic-settings>=2.3, typer>=0.12 and
    pillow>=10 let pip keep an installed version the code cannot import or run with; then
    huggingface_hub>=1.0, tokenizers>=0.22 and safetensors>=0.4 named floors no install could hold
    beside diffusers>=0.42 and transformers>=5.21 (RELIABILITY 1200), and typer>=0.13 let pip pair
    a typer whose --help fails with the click it takes (RELIABILITY 1202); then pydantic>=2.11
    and starlette>=1.6 let pip keep a release without Field(exclude_if) or FileResponse._open_file
    (RELIABILITY 1400-1401); then typer>=0.16 let pip pair a typer with click 8.5, which drops
    every argument's help (RELIABILITY 1471)."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    declared = {}
    for line in PYPROJECT["project"]["dependencies"]:
        req = Requirement(line)
        lows = [Version(s.version) for s in req.specifier if s.operator in (">=", "==")]
        declared[req.name.lower().replace("_", "-")] = max(lows) if lows else None
    for name, (floor, why) in FLOORS.items():
        assert declared[name] is not None and declared[name] >= Version(floor), (name, declared[name], why)


def _backend() -> dict[str, Any]:
    """build_backend/lorastudio_build.py's names, loaded as the build frontend does (backend-path)."""
    system = PYPROJECT["build-system"]
    path = ROOT / Path(*system["backend-path"], system["build-backend"] + ".py")
    return runpy.run_path(str(path), run_name="lorastudio_build_under_test")


def test_the_build_backend_refuses_a_wheel_without_the_web_ui(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: a wheel or sdist built from a checkout whose UI was never built (web_dist is
    git-ignored) was made without it, silently; its `lorastudio serve` answered 404 at /."""
    backend = _backend()
    monkeypatch.delenv(backend["WITHOUT_UI"], raising=False)
    monkeypatch.chdir(tmp_path)
    for hook in ("build_wheel", "build_sdist"):
        with pytest.raises(backend["MissingWebUI"], match="scripts/build_web.sh"):
            backend[hook](str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()
    ui = tmp_path / backend["UI_INDEX"]
    ui.parent.mkdir(parents=True)
    ui.write_text("<html></html>", encoding="utf-8")
    # built before the docs viewers came with it (fix 1154): /docs would serve a note only
    with pytest.raises(backend["MissingWebUI"], match="redoc.standalone.js: the web UI was built before"):
        backend["require_web_ui"](tmp_path)
    assert backend["DOCS_ASSETS"] == (*SWAGGER_FILES, *REDOC_FILES)  # api/docs_pages.py's
    (ui.parent / ASSETS_DIR).mkdir()
    for name in backend["DOCS_ASSETS"]:
        (ui.parent / ASSETS_DIR / name).write_text("//", encoding="utf-8")
    backend["require_web_ui"](tmp_path)  # built: no refusal
    ui.unlink()
    monkeypatch.setenv(backend["WITHOUT_UI"], "1")
    backend["require_web_ui"](tmp_path)  # API-only on purpose
    # every other hook is setuptools' own (an editable install builds before the UI does)
    from setuptools import build_meta

    for hook in ("build_editable", "prepare_metadata_for_build_wheel", "get_requires_for_build_wheel"):
        assert backend[hook] is getattr(build_meta, hook), hook


def test_serve_names_a_missing_web_ui(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An install without the UI (built with LORASTUDIO_BUILD_WITHOUT_UI=1, or a checkout before
    scripts/build_web.sh) says so at the start instead of a bare 404 at / in the browser."""
    from cli_runner import run_cli_streams

    served: list[object] = []

    def fake_serve(settings, host, port, home_lock) -> None:  # noqa: ANN001
        served.append(port)
        home_lock.release()

    monkeypatch.setattr("lorastudio.api.app.serve", fake_serve)
    monkeypatch.setattr("lorastudio.api.app.WEB_DIST", tmp_path / "web_dist")
    code, out, err = run_cli_streams(capsys, monkeypatch, "serve", "--port", "7999")
    assert code == 0 and served == [7999], (out, err)
    assert f"no web UI ({tmp_path / 'web_dist' / 'index.html'} is missing)" in err
    (tmp_path / "web_dist").mkdir()
    (tmp_path / "web_dist" / "index.html").write_text("<html></html>", encoding="utf-8")
    code, out, err = run_cli_streams(capsys, monkeypatch, "serve", "--port", "7999")
    assert code == 0 and "web UI" not in err, err
