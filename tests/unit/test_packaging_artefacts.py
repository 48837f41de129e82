"""The built artefacts (session 33 packaging audit), slow: an sdist built from the checkout's tracked
files and its web UI, then a wheel built from that sdist alone (no checkout, no network: the build
backend with the setuptools of this venv, as `pip wheel --no-build-isolation --no-index` does).
The wheel carries the UI its index.html names, the API docs viewers' files, the license and the
console script, and nothing of the checkout beside the package (tests, bench, web sources, caches)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

from lorastudio.api.docs_pages import ASSETS_DIR, REDOC_FILES, SWAGGER_FILES

ROOT = Path(__file__).resolve().parents[2]
UI = ROOT / "src" / "lorastudio" / "web_dist"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
# what a frontend does without isolation: the backend imported from backend-path, one hook called
HOOK = """
import json, sys
sys.path.insert(0, sys.argv[1])
backend = __import__(sys.argv[2])
print(json.dumps(getattr(backend, sys.argv[3])(sys.argv[4])))
"""
CHECKOUT_ONLY = re.compile(
    r"(^|/)(tests|bench|web|scripts|\.venv|node_modules|__pycache__|\.git)/|\.pyc$|\.build-stamp$"
)

pytestmark = pytest.mark.slow


def _hook(project: Path, hook: str, out: Path) -> Path:
    """Run build hook `hook` of `project`'s own backend in a child process; the artefact's path."""
    system = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))["build-system"]
    env = {k: v for k, v in os.environ.items() if k != "LORASTUDIO_BUILD_WITHOUT_UI"}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            HOOK,
            str(project / system["backend-path"][0]),
            system["build-backend"],
            hook,
            str(out),
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out / json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def artefacts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(sdist, wheel built from the unpacked sdist alone)."""
    if not (UI / "index.html").is_file():
        pytest.skip("the web UI is not built (scripts/build_web.sh): the build backend refuses the sdist")
    tmp = tmp_path_factory.mktemp("artefacts")
    tracked = (
        subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60)
        .stdout.decode()
        .split("\0")
    )
    checkout = tmp / "checkout"
    for rel in filter(None, tracked):
        if (ROOT / rel).is_file():
            (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
            (checkout / rel).write_bytes((ROOT / rel).read_bytes())
    for path in UI.rglob("*"):
        if path.is_file():
            (checkout / path.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
            (checkout / path.relative_to(ROOT)).write_bytes(path.read_bytes())
    sdist = _hook(checkout, "build_sdist", tmp / "sdist")
    with tarfile.open(sdist) as archive:
        archive.extractall(tmp / "unpacked", filter="data")
    (unpacked,) = (tmp / "unpacked").iterdir()
    return sdist, _hook(unpacked, "build_wheel", tmp / "wheel")


def test_the_wheel_built_from_the_sdist_carries_the_ui_and_the_license(artefacts: tuple[Path, Path]) -> None:
    _, wheel = artefacts
    version = PYPROJECT["project"]["version"]
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = f"lorastudio-{version}.dist-info"
        index = archive.read("lorastudio/web_dist/index.html").decode("utf-8")
        metadata = archive.read(f"{info}/METADATA").decode("utf-8")
        scripts = archive.read(f"{info}/entry_points.txt").decode("utf-8")
    for asset in re.findall(r'(?:src|href)="/?(assets/[^"]+)"', index):
        assert f"lorastudio/web_dist/{asset}" in names, asset
    for asset in (*SWAGGER_FILES, *REDOC_FILES):  # /docs and /redoc without a CDN (fix 1154)
        assert f"lorastudio/web_dist/{ASSETS_DIR}/{asset}" in names, asset
    # the build's id: a stale page told to reload (api/web_build.py, fix 2061)
    assert "lorastudio/web_dist/build-id.txt" in names
    assert f"{info}/licenses/LICENSE" in names
    assert "lorastudio/__main__.py" in names and "lorastudio/py.typed" in names
    assert "lorastudio = lorastudio.cli.app:main" in scripts
    assert f"\nVersion: {version}\n" in metadata and "\nLicense-Expression: Apache-2.0\n" in metadata
    assert f"\nRequires-Python: {PYPROJECT['project']['requires-python']}\n" in metadata
    assert not [n for n in names if CHECKOUT_ONLY.search(n)]
    assert {n.split("/")[0] for n in names} == {"lorastudio", info}


def test_the_sdist_holds_what_a_wheel_is_built_from(artefacts: tuple[Path, Path]) -> None:
    sdist, _ = artefacts
    with tarfile.open(sdist) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    assert {"LICENSE", "README.md", "pyproject.toml", "build_backend/lorastudio_build.py"} <= names
    assert "src/lorastudio/web_dist/index.html" in names
    assert not [n for n in names if CHECKOUT_ONLY.search(n)]
