import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { mockFetch } from "../test/fixtures";
import { authState, installImageRetry, resetAuthForTests, setToken } from "./auth";
import { api } from "./endpoints";

const TOKEN = "s3cret-token-in-no-url";

/** Every URL builder of the API (the names ending in Url: what <img>, EventSource and download
 * links load), called with sample arguments. */
function everyBrowserUrl(): [string, string][] {
  return Object.entries(api)
    .filter(([name, fn]) => name.endsWith("Url") && typeof fn === "function")
    .map(([name, fn]) => [name, String((fn as (...a: unknown[]) => unknown)("data set", "sub/a b.png", 3))]);
}

describe("URLs the browser loads by itself", () => {
  beforeEach(() => {
    window.localStorage.clear();
    resetAuthForTests();
  });
  afterEach(() => {
    vi.unstubAllGlobals();
    window.localStorage.clear();
    resetAuthForTests();
  });

  it("never carry the API token (a proxy's access log, the history, a Referer kept it)", () => {
    setToken(TOKEN);
    const urls = everyBrowserUrl();
    expect(urls.map(([n]) => n)).toEqual(
      expect.arrayContaining(["thumbnailUrl", "eventsUrl", "sampleUrl", "runConfigUrl", "loraFileUrl", "imageUrl"]),
    );
    for (const [name, url] of urls) {
      expect(url, name).not.toContain(TOKEN);
      expect(url, name).not.toContain(encodeURIComponent(TOKEN));
      expect(url, name).not.toMatch(/[?&]token=/);
    }
    expect(api.imageUrl("/gallery/x.png?size=64")).toBe("/gallery/x.png?size=64");
  });

  it("an image refused is retried once, after the session is renewed; a refused renewal asks for the token", async () => {
    setToken(TOKEN);
    let status = 200;
    const calls = mockFetch(({ url }) => (url.startsWith("/api/session?") ? { status, body: { cookie: true, idle_s: 1, max_s: 1 } } : undefined));
    const remove = installImageRetry();
    const img = document.createElement("img");
    img.setAttribute("src", "/gallery/a.png");
    document.body.appendChild(img);
    const set = vi.spyOn(img, "setAttribute");
    img.dispatchEvent(new Event("error"));
    await vi.waitFor(() => expect(set).toHaveBeenCalledWith("src", "/gallery/a.png"));
    const sessions = calls.filter((c) => c.url.startsWith("/api/session?"));
    expect(sessions).toHaveLength(1);
    expect(sessions[0]).toMatchObject({ method: "POST", headers: { Authorization: `Bearer ${TOKEN}` } });
    img.dispatchEvent(new Event("error")); // once only: no loop on an image that is truly gone
    await new Promise((r) => setTimeout(r, 0));
    expect(set).toHaveBeenCalledTimes(1);
    // after a restart with another token: the renewal is refused, and the UI asks for the token
    resetAuthForTests();
    setToken(TOKEN);
    status = 401;
    const other = document.createElement("img");
    other.setAttribute("src", "/api/datasets/d/thumbnails/a.png?size=256");
    document.body.appendChild(other);
    other.dispatchEvent(new Event("error"));
    await vi.waitFor(() => expect(authState()).toMatchObject({ needed: true, refused: true }));
    expect(calls.filter((c) => c.url.startsWith("/api/session?"))).toHaveLength(2);
    remove();
    img.remove();
    other.remove();
  });
});
