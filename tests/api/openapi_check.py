"""A client author's check of an answer against the app's own OpenAPI document (3.1, the JSON
Schema subset pydantic and FastAPI write): the status must be one the operation declares, the
media type one declared for it, and a JSON body must match the declared schema.

Objects are read strictly: a key the schema does not name (where it lists `properties` and says
nothing of `additionalProperties`) is a mismatch, since a client generated from the document
(the web UI's types) cannot see it. No third-party validator: the subset is small."""

from __future__ import annotations

import json
from typing import Any

import httpx

Doc = dict[str, Any]


def operation(doc: Doc, method: str, template: str) -> dict[str, Any]:
    """The operation object of `method` on the path `template` (KeyError: not declared)."""
    return doc["paths"][template][method.lower()]


def contract_problems(doc: Doc, method: str, template: str, response: httpx.Response) -> list[str]:
    """Every way `response` departs from what the document declares for the operation (empty:
    it conforms). HEAD is checked against its GET (no body)."""
    op = operation(doc, "get" if method.upper() == "HEAD" else method, template)
    status = str(response.status_code)
    declared = op["responses"].get(status)
    where = f"{method.upper()} {template} -> {status}"
    if declared is None:
        return [f"{where}: status not declared (declared: {sorted(op['responses'])})"]
    content = declared.get("content")
    media = response.headers.get("content-type", "").split(";")[0].strip()
    if method.upper() == "HEAD" or response.status_code == 204:
        return []
    if not content:
        return (
            [f"{where}: the answer has a body ({media or 'no type'}) but none is declared"]
            if response.content
            else []
        )
    declared_media = next((m for m in content if _media_matches(m, media)), None)
    if declared_media is None:
        return [f"{where}: media type {media!r} not declared ({sorted(content)})"]
    schema = content[declared_media].get("schema")
    if media != "application/json" or schema is None:
        return []
    try:
        body = json.loads(response.content)
    except ValueError as err:
        return [f"{where}: not JSON ({err})"]
    return [f"{where}: {p}" for p in schema_problems(doc, schema, body, "$")]


def schema_problems(doc: Doc, schema: dict[str, Any], value: Any, at: str) -> list[str]:
    """Where `value` does not match `schema` (JSON paths from `at`)."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return schema_problems(doc, doc["components"]["schemas"][name], value, at)
    problems: list[str] = []
    for sub in schema.get("allOf", []):
        problems += schema_problems(doc, sub, value, at)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            tries = [schema_problems(doc, sub, value, at) for sub in schema[key]]
            if all(tries):
                best = min(tries, key=len)
                problems.append(f"{at}: matches none of {key} (nearest: {best[:3]})")
    if "const" in schema and value != schema["const"]:
        problems.append(f"{at}: {value!r} is not the constant {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{at}: {value!r} not in {schema['enum']}")
    kind = schema.get("type")
    if kind is None:
        return problems
    kinds = kind if isinstance(kind, list) else [kind]
    if not any(_is(value, k) for k in kinds):
        return [*problems, f"{at}: {type(value).__name__} {_short(value)} is not {kind}"]
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                problems.append(f"{at}: required key {name!r} missing")
        extra = schema.get("additionalProperties")
        for name, item in value.items():
            if name in props:
                problems += schema_problems(doc, props[name], item, f"{at}.{name}")
            elif isinstance(extra, dict):
                problems += schema_problems(doc, extra, item, f"{at}.{name}")
            elif extra is False or (extra is None and props):
                problems.append(f"{at}: key {name!r} not declared")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            problems += schema_problems(doc, schema["items"], item, f"{at}[{i}]")
    return problems


def _media_matches(declared: str, sent: str) -> bool:
    """Whether the media type `sent` is the `declared` one or in its range (`image/*`)."""
    if declared.endswith("/*"):
        return sent.startswith(declared[:-1])
    return declared == sent


def _is(value: Any, kind: str) -> bool:
    return {
        "object": isinstance(value, dict),
        "array": isinstance(value, list),
        "string": isinstance(value, str),
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, int | float) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
        "null": value is None,
    }[kind]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 60 else text[:57] + "..."
