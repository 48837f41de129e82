import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { ensureSession, setToken } from "./auth";
import { served } from "./base";
import { get, postWithProgress } from "./client";
import { api } from "./endpoints";

/** The page as a reverse proxy serves it under a sub-path (nginx `location /studio/`). */
describe("a studio served under a proxy's sub-path", () => {
  beforeEach(() => window.history.pushState({}, "", "/studio/#/runs"));
  afterEach(() => {
    window.history.pushState({}, "", "/");
    setToken("");
    vi.unstubAllGlobals();
  });

  it("sends its API calls, uploads, event stream and image URLs under the sub-path", async () => {
    const fetched: string[] = [];
    vi.stubGlobal(
      "fetch",
      vi.fn(async (url: string) => {
        fetched.push(url);
        return new Response("[]", { status: 200 });
      }),
    );
    await get("/api/runs");
    expect(fetched).toEqual(["/studio/api/runs"]);

    const opened: string[] = [];
    class OpenXhr {
      status = 201;
      statusText = "";
      responseText = "{}";
      upload = { onprogress: null };
      onload: null | (() => void) = null;
      onerror: null | (() => void) = null;
      open(_method: string, url: string) {
        opened.push(url);
      }
      setRequestHeader() {}
      getResponseHeader() {
        return null;
      }
      send() {
        this.onload?.();
      }
    }
    vi.stubGlobal("XMLHttpRequest", OpenXhr);
    await postWithProgress("/api/datasets/d/files", new FormData(), () => undefined, null);
    expect(opened).toEqual(["/studio/api/datasets/d/files"]);
    // the web's uploads ask for no dataset summary: the page lists the dataset once, at the end
    // (RELIABILITY 2190: a summary per 32-image batch cost work linear in the dataset)
    await api.upload("d", [], () => undefined, "files", null);
    expect(opened.at(-1)).toBe("/studio/api/datasets/d/files?summary=false");

    expect(api.eventsUrl()).toBe("/studio/api/train/events");
    setToken("t0k");
    // a URL the server answered with (a gallery image's `url`) goes under the sub-path too
    // (never with the token: the browser session's cookie stands for it, its Path the sub-path)
    expect(api.imageUrl("/gallery/a.png")).toBe("/studio/gallery/a.png");
    expect(api.eventsUrl()).toBe("/studio/api/train/events");
    const sessionFetch = vi.fn(async (_url: string, _init?: RequestInit) => new Response("{}"));
    vi.stubGlobal("fetch", sessionFetch);
    await ensureSession();
    expect(sessionFetch.mock.calls.map((c) => c[0])).toEqual(["/studio/api/session?path=%2Fstudio%2F"]);
  });

  it("leaves other sites' URLs and paths already under the sub-path as they are", () => {
    expect(served("https://huggingface.co/me/lora")).toBe("https://huggingface.co/me/lora");
    expect(served("//cdn.example/x")).toBe("//cdn.example/x");
    expect(served("/studio/api/runs")).toBe("/studio/api/runs");
  });

  it("served at the root, uses the server's paths unchanged", () => {
    window.history.pushState({}, "", "/#/runs");
    expect(served("/api/runs")).toBe("/api/runs");
    expect(api.eventsUrl()).toBe("/api/train/events");
  });
});
