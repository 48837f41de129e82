"""Browser sessions (api/sessions.py, session 32 token-in-URL audit): the web UI's EventSource,
<img> and download URLs carry a session cookie instead of `?token=<the API token>`. The cookie
stands for the token only on GETs of the studio's own page; writes need the bearer header; a
session ends with its expiry, a restart or a token change; the store stays bounded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from live_server import LOOPBACK
from lorastudio.api.app import create_app
from lorastudio.api.sessions import MAX_SESSIONS, SessionStore
from lorastudio.settings import Settings

TOKEN = "tok-session"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
OWN_PAGE = {"Sec-Fetch-Site": "same-origin"}
NAME = "lorastudio_session_80"  # TestClient's server port


@pytest.fixture
def secured(settings: Settings) -> Iterator[TestClient]:
    with TestClient(
        create_app(settings.model_copy(update={"api_token": TOKEN})), base_url=LOOPBACK
    ) as client:
        yield client


def _open(client: TestClient, headers: dict[str, str] | None = None) -> tuple[str, str]:
    """POST /api/session with the bearer: (the session id, the Set-Cookie header)."""
    res = client.post("/api/session", headers={**BEARER, **(headers or {})})
    assert res.status_code == 200 and res.json()["cookie"] is True, res.text
    header = res.headers["set-cookie"]
    value = header.split(";")[0]
    assert value.startswith(f"{NAME}="), header
    client.cookies.clear()  # each request below names its cookie itself
    return value.split("=", 1)[1], header


def _get(client: TestClient, path: str, sid: str, **headers: str):
    return client.get(path, headers={"Cookie": f"{NAME}={sid}", **OWN_PAGE, **headers})


def test_the_session_cookie_stands_for_the_token_on_the_pages_own_gets_only(secured: TestClient) -> None:
    """Before: the UI put the API token itself in every such URL (`?token=`), where a proxy's
    access log, the history, a Referer kept it."""
    assert secured.post("/api/session").status_code == 401  # the bearer opens one, nothing else
    assert secured.post("/api/session", params={"token": TOKEN}).status_code == 401
    sid, header = _open(secured)
    attrs = {a.strip().split("=")[0].lower(): a.strip() for a in header.split(";")[1:]}
    assert "httponly" in attrs and attrs["samesite"].lower() == "samesite=strict", header
    assert attrs["path"] == "Path=/" and "secure" not in attrs, header
    assert TOKEN not in header
    assert _get(secured, "/api/runs", sid).status_code == 200
    for path in (
        "/api/runs",
        "/docs",
    ):  # typed by the user (the docs page then fetches its schema as /api/runs)
        assert _get(secured, path, sid, **{"Sec-Fetch-Site": "none"}).status_code == 200, path
    # a stolen cookie on a write: refused (writes need the bearer), from our own page too
    res = secured.post("/api/train/stop", json={}, headers={"Cookie": f"{NAME}={sid}", **OWN_PAGE})
    assert res.status_code == 401 and "SessionExpired" in res.json()["detail"], res.text
    # another site's page (or a sibling port's: same-site) loading our stream or images with it
    for site in ("cross-site", "same-site"):
        for path in ("/api/train/events", "/api/runs"):
            res = _get(secured, path, sid, **{"Sec-Fetch-Site": site, "Origin": "http://127.0.0.1:9999"})
            assert res.status_code == 403, (site, path, res.text)  # refused before the cookie (fix 1717)
            nav = _get(secured, path, sid, **{"Sec-Fetch-Site": site, "Sec-Fetch-Mode": "navigate"})
            assert nav.status_code == 401, (site, path, nav.text)  # a link followed: the cookie stays ours
    assert _get(secured, "/api/runs", "forged-" + sid).status_code == 401
    assert secured.get("/api/runs", params={"token": TOKEN}).status_code == 200  # scripts' ?token= stays
    # closed: the cookie is dead and cleared
    res = secured.delete("/api/session", headers={**BEARER, "Cookie": f"{NAME}={sid}"})
    assert res.status_code == 200 and res.json()["cookie"] is True
    assert f'{NAME}=""' in res.headers["set-cookie"] or "Max-Age=0" in res.headers["set-cookie"]
    assert _get(secured, "/api/runs", sid).status_code == 401


def test_a_token_change_or_a_restart_ends_every_session(secured: TestClient, tmp_path: Path) -> None:
    sid, _ = _open(secured)
    renewed, _ = _open(secured, {"Cookie": f"{NAME}={sid}"})  # a new one replaces the one it carried
    assert _get(secured, "/api/runs", sid).status_code == 401
    assert _get(secured, "/api/runs", renewed).status_code == 200
    app = secured.app
    app.state.settings = app.state.settings.model_copy(update={"api_token": "tok-rotated"})  # type: ignore[attr-defined]
    res = _get(secured, "/api/runs", renewed)
    assert res.status_code == 401 and "SessionExpired" in res.json()["detail"]
    assert res.headers["www-authenticate"] == 'Bearer error="invalid_token"'
    assert secured.post("/api/session", headers=BEARER).status_code == 401  # the old token opens none
    sid, _ = _open(secured, {"Authorization": "Bearer tok-rotated"})
    # the server restarted (in memory only: a new server knows none)
    with TestClient(
        create_app(Settings(home=tmp_path, api_token="tok-rotated")), base_url=LOOPBACK
    ) as restarted:
        assert _get(restarted, "/api/runs", sid).status_code == 401  # another server's session


def test_behind_a_proxy_the_cookie_is_secure_and_under_the_studios_folder(settings: Settings) -> None:
    """The browser sends a Path=/ cookie to every application a proxy serves on the host."""
    proxied = settings.model_copy(update={"api_token": TOKEN, "root_path": "/studio"})
    with TestClient(create_app(proxied), base_url=LOOPBACK) as client:
        _, header = _open(client, {"X-Forwarded-Proto": "https"})
        assert "Path=/studio;" in header and "Secure" in header, header
    with TestClient(
        create_app(settings.model_copy(update={"api_token": TOKEN})), base_url=LOOPBACK
    ) as client:
        # a proxy that strips /lab/studio/: only the page knows its folder
        res = client.post("/api/session", params={"path": "/lab/studio/"}, headers=BEARER)
        assert "Path=/lab/studio/;" in res.headers["set-cookie"], res.headers
        for bad in ("/a b", "studio", "/a\x01"):
            res = client.post("/api/session", params={"path": bad}, headers=BEARER)
            assert res.status_code == 422 and "set-cookie" not in res.headers, (bad, res.text)
        for cut in ("/a;Domain=evil.example", "/a,b"):  # cut at the folder above (RELIABILITY 1184)
            header = client.post("/api/session", params={"path": cut}, headers=BEARER).headers["set-cookie"]
            assert "Path=/;" in header and "Domain" not in header and "/a" not in header, (cut, header)


def test_sessions_expire_and_stay_bounded() -> None:
    now = [0.0]
    store = SessionStore(idle_s=10, max_s=25, limit=4, clock=lambda: now[0])
    sid = store.open(TOKEN)
    now[0] = 9
    assert store.check(sid, TOKEN)  # used: the idle clock restarts
    now[0] = 18
    assert store.check(sid, TOKEN)
    now[0] = 25  # used all along, but as old as a session may be
    assert not store.check(sid, TOKEN)
    idle = store.open(TOKEN)
    now[0] = 35
    assert not store.check(idle, TOKEN)  # unused for idle_s
    assert not store.check(store.open(TOKEN), "another token")
    kept = store.open(TOKEN)
    for _ in range(1000):  # a client opening sessions in a loop grows nothing
        store.open(TOKEN)
        assert store.check(kept, TOKEN)  # the one in use stays (the least recently used go)
    assert len(store) == 4
    assert len(SessionStore()) == 0 and MAX_SESSIONS >= 8


def test_a_cookie_at_two_paths_stands_for_each_page_and_a_renewal_replaces_its_own(
    secured: TestClient,
) -> None:
    """The UI loaded from `/` and from `/studio/` on one host and port (the root path is served
    both ways) holds the cookie at both paths, and the `/studio/` page's requests carry both,
    its own first (RFC 6265 5.4). Was: Starlette's `request.cookies` kept the last (the `/`
    page's), so the `/studio/` page opening its session closed the `/` page's, then every GET it
    made was refused (SessionExpired) and each renewal closed the same dead one: 401 for good
    (RELIABILITY 1105)."""
    root, _ = _open(secured)  # the page at /
    res = secured.post(
        "/api/session", params={"path": "/studio/"}, headers={**BEARER, "Cookie": f"{NAME}={root}"}
    )
    studio = res.headers["set-cookie"].split(";")[0].split("=", 1)[1]
    both = f"{NAME}={studio}; {NAME}={root}"  # what the /studio/ page's requests carry
    assert _get(secured, "/api/runs", root).status_code == 200  # the / page's session lives on
    res = secured.get("/api/runs", headers={"Cookie": both, **OWN_PAGE})
    assert res.status_code == 200, res.text
    res = secured.post("/api/session", params={"path": "/studio/"}, headers={**BEARER, "Cookie": both})
    renewed = res.headers["set-cookie"].split(";")[0].split("=", 1)[1]
    assert _get(secured, "/api/runs", studio).status_code == 401  # its own was replaced
    assert _get(secured, "/api/runs", root).status_code == 200  # the other page's was not
    assert (
        secured.get(
            "/api/runs", headers={"Cookie": f"{NAME}={renewed}; {NAME}={root}", **OWN_PAGE}
        ).status_code
        == 200
    )


def test_a_proxy_prefix_a_browser_keeps_unescaped_is_the_cookies_path(secured: TestClient) -> None:
    """A browser's URL.pathname keeps `[`, `]`, `|` and `^` as they are (a proxy serving the
    studio under `/lab[2]/`): the UI's `?path=` was refused 422, no session opened, and every
    image and stream of the page was then refused (RELIABILITY 1106)."""
    for folder in ("/lab[2]/", "/a|b/", "/x^y/"):
        res = secured.post("/api/session", params={"path": folder}, headers=BEARER)
        assert res.status_code == 200, (folder, res.text)
        assert f"Path={folder};" in res.headers["set-cookie"], res.headers


def test_a_proxy_prefix_holding_a_semicolon_or_comma_opens_a_session_at_the_folder_above(
    secured: TestClient,
) -> None:
    """RELIABILITY 1184: a browser keeps `;` and `,` unescaped in a path, and a cookie's Path
    cannot hold them: the UI's `?path=` was refused 422, so no session opened and the page's
    images and streams were refused. Now the cookie takes the widest folder above that holds
    neither; its session stands for the token and DELETE clears the same cookie."""
    for folder, cookie_path in (("/a;b/studio/", "/"), ("/lab,2/x/", "/"), ("/ok/a;b,c/", "/ok/")):
        res = secured.post("/api/session", params={"path": folder}, headers=BEARER)
        assert res.status_code == 200 and res.json()["cookie"] is True, (folder, res.text)
        header = res.headers["set-cookie"]
        assert f"Path={cookie_path};" in header and ";b" not in header and ",2" not in header, header
        sid = header.split(";")[0].split("=", 1)[1]
        secured.cookies.clear()
        assert _get(secured, "/api/info", sid).status_code == 200
        gone = secured.request("DELETE", "/api/session", params={"path": folder}, headers=BEARER)
        assert gone.status_code == 200 and f"Path={cookie_path};" in gone.headers["set-cookie"], gone.headers


def test_a_link_followed_from_another_sites_page_is_refused_saying_how_to_open_it(
    secured: TestClient,
) -> None:
    """A download link pasted into a chat or mail read in the browser and clicked there: the
    browser sends no SameSite=Strict cookie with that navigation (and a sibling port's, same-site,
    is not used), so the 401 said only "missing or wrong API token" (RELIABILITY 1810)."""
    sid, _ = _open(secured)
    link = {"Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}
    for site, cookie in (("cross-site", None), ("same-site", sid)):
        headers = {**link, "Sec-Fetch-Site": site, **({"Cookie": f"{NAME}={cookie}"} if cookie else {})}
        res = secured.get("/api/runs", headers=headers)
        assert res.status_code == 401, (site, res.text)
        detail = res.json()["detail"]
        assert "link followed from another site" in detail and "address bar" in detail, (site, detail)
    # the same link pasted into the address bar (Sec-Fetch-Site: none) carries the cookie: answered
    pasted = _get(secured, "/api/runs", sid, **{**link, "Sec-Fetch-Site": "none"})
    assert pasted.status_code == 200, pasted.text
    # a wrong ?token= on such a link is still "wrong API token", and a fetch without one unchanged
    wrong = secured.get(
        "/api/runs", params={"token": "nope"}, headers={**link, "Sec-Fetch-Site": "cross-site"}
    )
    assert wrong.json()["detail"] == "missing or wrong API token", wrong.text
    assert secured.get("/api/runs").json()["detail"] == "missing or wrong API token"


def test_a_scripts_write_with_the_token_in_the_query_is_told_to_send_the_header(secured: TestClient) -> None:
    """`?token=` stands on a GET only (api/sessions.py): a script's POST or DELETE sending it there
    was refused "missing or wrong API token", as if the token were wrong (RELIABILITY 1812)."""
    for method, path in (("POST", "/api/train/stop"), ("DELETE", "/api/runs/nope")):
        for value in (TOKEN, "wrong"):  # the same answer either way: the value is not read
            res = secured.request(
                method, path, params={"token": value}, json={} if method == "POST" else None
            )
            assert res.status_code == 401, (method, res.text)
            assert "?token= is read on a GET only" in res.json()["detail"], (method, res.text)
            assert "Authorization: Bearer" in res.json()["detail"]
    assert secured.post("/api/train/stop", json={}).json()["detail"] == "missing or wrong API token"
