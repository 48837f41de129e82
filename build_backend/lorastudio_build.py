"""lorastudio's build backend: setuptools' own (setuptools.build_meta), refusing to build a wheel
or an sdist that would lack the web UI.

The UI is built by scripts/build_web.sh (Node.js) into src/lorastudio/web_dist/, which git
ignores; setuptools packs whatever is there (pyproject's package-data) and says nothing when
it is absent, so `python -m build` in a fresh clone made a wheel whose `lorastudio serve`
answered 404 at / (the API alone), and an sdist that passed the gap on to every wheel built
from it. An editable install (scripts/setup.sh installs before it builds the UI) is not
checked: it serves the checkout's web_dist once built. LORASTUDIO_BUILD_WITHOUT_UI=1 builds
without the UI on purpose (an API-only install).
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403 (the hooks not wrapped here: editable, metadata)

UI_INDEX = Path("src") / "lorastudio" / "web_dist" / "index.html"  # relative to the project root
# the API docs viewers' files build_web.sh copies beside it (api/docs_pages.py's SWAGGER_FILES and
# REDOC_FILES; tests/unit/test_packaging.py keeps the two lists the same)
DOCS_ASSETS = ("swagger-ui.css", "swagger-ui-bundle.js", "swagger-init.js", "redoc.standalone.js")
WITHOUT_UI = "LORASTUDIO_BUILD_WITHOUT_UI"


class MissingWebUI(RuntimeError):
    """The built UI is not in the source tree."""


def require_web_ui(root: Path) -> None:
    """Raise MissingWebUI unless `root` (the project being built: a checkout or an unpacked
    sdist) holds the built UI, or LORASTUDIO_BUILD_WITHOUT_UI=1 says to build without it. A UI
    built before the API docs viewers came with it (its docs-assets/ lacking a file) is refused
    too: /docs and /redoc would only name the missing files."""
    if os.environ.get(WITHOUT_UI) == "1":
        return
    docs = (root / UI_INDEX).parent / "docs-assets"
    missing = [name for name in DOCS_ASSETS if not (docs / name).is_file()]
    if (root / UI_INDEX).is_file() and missing:
        raise MissingWebUI(
            f"{docs} lacks {', '.join(missing)}: the web UI was built before the API docs viewers"
            " came with it. Run `bash scripts/build_web.sh` again first."
        )
    if (root / UI_INDEX).is_file():
        return
    raise MissingWebUI(
        f"{root / UI_INDEX} is missing: the web UI is not built, and a wheel or sdist made now"
        " would serve no UI. Run `bash scripts/build_web.sh` (Node.js 20.19+) first, or set"
        f" {WITHOUT_UI}=1 to build an API-only package on purpose."
    )


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):  # noqa: ANN001, ANN201
    """setuptools' build_wheel, once the UI is there (require_web_ui)."""
    require_web_ui(Path.cwd())
    return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory, config_settings=None):  # noqa: ANN001, ANN201
    """setuptools' build_sdist, once the UI is there (require_web_ui)."""
    require_web_ui(Path.cwd())
    return _setuptools.build_sdist(sdist_directory, config_settings)
