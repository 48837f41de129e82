"""GET /api/runs' `q` (session 37 kpfix6; jobs/run_search.py): the Runs list's search looked
only at the runs loaded (fix 1413), so a run older than the pages loaded was not found. Now the
store keeps the runs whose name, id or base_model holds every word of `q` (any case, NFC), the
cursor pages the matches, `total` counts them, and a client without `q` gets what it got."""

from __future__ import annotations

import unicodedata

from fastapi.testclient import TestClient

from lorastudio.jobs.records import JobStatus


def test_q_finds_old_runs_by_name_id_or_base_and_pages_them(client: TestClient) -> None:
    store = client.app.state.store  # type: ignore[attr-defined]
    for i in range(12):
        name = "Café-cat" if i % 3 == 0 else f"dog-{i}"
        base = {1: "/models/FLUX.1-dev", 4: "D:\\Models\\Ünet-x"}.get(
            i, "owner/sdxl"
        )  # 4: escapes in its JSON
        store.create_run(f"id{i:02d}", name, "flux", {"base_model": base}, "2026-12-01T00:00:00+00:00",
                         status=JobStatus.COMPLETED)  # fmt: skip
    store._conn.execute("UPDATE runs SET config_json='{not json' WHERE id='id02'")  # an odd row

    def ids(**params: object) -> tuple[list[str], int, str | None]:
        body = client.get("/api/runs", params=params).json()
        return [r["id"] for r in body["runs"]], body["total"], body["next_cursor"]

    assert ids(limit=2) == (["id11", "id10"], 12, ids(limit=2)[2])  # no q: every run, as before
    nfd = unicodedata.normalize("NFD", "CAFÉ")
    got, total, cursor = ids(q=f" {nfd}  cat ", limit=2)
    assert (got, total) == (["id09", "id06"], 4) and cursor
    got, total, cursor = ids(q=f"{nfd} cat", limit=2, cursor=cursor)
    assert (got, total, cursor) == (["id03", "id00"], 4, None)
    assert ids(q="flux.1")[:2] == (["id01"], 1)  # the base_model
    assert ids(q="ID07")[:2] == (["id07"], 1)
    sdxl = ["id11", "id10", "id08", "id07", "id05"]  # id02's config unreadable: no base
    assert ids(q="dog sdxl")[:2] == (sdxl, 5)
    assert ids(q="ÜNET models\\ünet")[:2] == (["id04"], 1)
    assert ids(q="dog flux")[:2] == (["id01"], 1)  # one word in the name, the other in the base
    assert ids(q="  ")[1] == 12  # a blank q: every run
    assert ids(q="nothing") == ([], 0, None)
    assert client.get("/api/runs", params={"q": "x" * 256}).status_code == 422
