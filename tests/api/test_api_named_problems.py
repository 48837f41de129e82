"""A refusal names what the client sent (session 36 messages, fixed in session 37 kpfix6):
POST /api/datasets/{name}/rename named its problems `new name`, no key of its body
(data/dataset_names.rename_dataset), and a 422 echoed a long input whole (a 100,000-character
`to` answered ~100 KB: api/errors._invalid_request now cuts a long string, saying so)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from lorastudio.settings import Settings


def _two_datasets(settings: Settings) -> None:
    datasets = settings.ensure_dirs().datasets_dir
    (datasets / "pets").mkdir()
    (datasets / "cats").mkdir()


def test_rename_names_its_problems_by_the_body_key(client: TestClient, settings: Settings) -> None:
    _two_datasets(settings)
    r = client.post("/api/datasets/pets/rename", json={"to": "cats"})
    assert r.status_code == 400, r.text
    assert [p["field"] for p in r.json()["problems"]] == ["to"], r.text
    r = client.post("/api/datasets/pets/rename", json={"to": "pets"})
    assert [p["field"] for p in r.json()["problems"]] == ["to"], r.text


def test_a_422_cuts_a_long_input_and_says_so(client: TestClient, settings: Settings) -> None:
    _two_datasets(settings)
    long = "é" * 100_000
    r = client.post("/api/datasets/pets/rename", json={"to": long})
    assert r.status_code == 422 and len(r.content) < 2_000, len(r.content)
    (item,) = r.json()["detail"]
    assert item["loc"] == ["body", "to"]
    assert item["input"] == "é" * 200 + "... (cut: 100,000 characters)"
    r = client.post("/api/datasets/pets/rename", json={"to": 5, "long": long})  # inside a whole body
    assert r.status_code == 422 and len(r.content) < 2_000, len(r.content)
    short = "x" * 200  # a short string is echoed exactly
    r = client.post("/api/datasets/pets/rename", json={"to": 5, "note": short})
    assert {i["loc"][-1]: i["input"] for i in r.json()["detail"]} == {"to": 5, "note": short}, r.text
    r = client.post("/api/datasets/pets/rename", json={"to": ["x"] * 100_000})  # a long list: its first items
    assert r.status_code == 422 and r.json()["detail"][0]["input"] == ["x"] * 20 + [
        "... (cut: 100,000 items)"
    ]
    r = client.post("/api/datasets/pets/rename", json={"to": "a", long: 1})  # an unknown key's loc
    assert r.status_code == 422 and len(r.content) < 2_000, len(r.content)
    assert r.json()["detail"][0]["loc"] == ["body", "é" * 200 + "... (cut: 100,000 characters)"]
    r = client.post("/api/datasets/pets/rename", json={"to": short + "x" * 801})
    (item,) = r.json()["detail"]
    assert item["input"].endswith("... (cut: 1,001 characters)"), item


def test_a_422_of_an_input_nested_hundreds_deep_is_answered(client: TestClient, settings: Settings) -> None:
    """A JSON body of 500 nested lists (json parses ~1,000): the echo recursed past Python's
    limit, a 500 on every JSON route; nested ECHO_DEPTH deep it is cut and says so."""
    _two_datasets(settings)
    deep = "[" * 500 + "]" * 500
    for body in (
        f'{{"to": {deep}}}',
        f'{{"to": 5, "x": {deep}}}',
        '{"to": ' + '{"a": ' * 500 + "1" + "}" * 501,
    ):
        r = client.post(
            "/api/datasets/pets/rename", content=body, headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 422 and len(r.content) < 2_000, (r.status_code, r.text[:200])
    r = client.post(
        "/api/datasets/pets/rename", content=f'{{"to": {deep}}}', headers={"Content-Type": "application/json"}
    )
    (item,) = r.json()["detail"]
    assert item["input"] == [[[[[[[["... (cut: nested deeper than 8)"]]]]]]]]
