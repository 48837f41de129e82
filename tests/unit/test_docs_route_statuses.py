"""A status README names in a sentence about one route is one that route declares in /openapi.json
(RELIABILITY 1690: each route declares only the statuses it answers, so a README sentence such as
"A caption edit (`PUT /api/datasets/NAME/captions/FILE`) ... (409 `CaptionConflict`)" must match
the document a client reads). Route descriptions are checked by test_docs_references.py."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

from lorastudio.api.app import create_app
from lorastudio.settings import Settings

README = re.sub(r"\s+", " ", (Path(__file__).resolve().parents[2] / "README.md").read_text("utf-8"))
ROUTE = re.compile(r"`?(GET|POST|PUT|DELETE) (/(?:api|gallery)/[^\s`),?]*)")
STATUS = re.compile(r"(?<![\w.%/-])([45]\d\d)(?![\w.%-])")


def _template(doc: dict[str, Any], path: str) -> str | None:
    """The document's path template README's `path` (NAME, FILE, ID for its parameters) is of."""
    for template in doc["paths"]:
        if re.fullmatch(re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)), path):
            return template
    return None


def test_every_status_readme_names_beside_one_route_is_declared_there() -> None:
    with tempfile.TemporaryDirectory() as home:
        doc = create_app(Settings(home=Path(home))).openapi()
    checked, undeclared = 0, []
    for sentence in re.split(r"(?<=[.;])\s", README):
        routes = ROUTE.findall(sentence)
        statuses = sorted({int(n) for n in STATUS.findall(sentence)})
        if len(routes) != 1 or not statuses:
            continue
        method, path = routes[0][0], routes[0][1].split("?")[0].rstrip(".:;")
        template = _template(doc, path)
        assert template is not None, f"README names {method} {path}, not a route of the document"
        declared = doc["paths"][template][method.lower()]["responses"]
        undeclared += [f"{method} {template}: {n}" for n in statuses if str(n) not in declared]
        checked += 1
    assert undeclared == [], f"README names statuses these routes do not declare: {undeclared}"
    assert checked >= 2, "README's sentences naming one route and a status were not found"
