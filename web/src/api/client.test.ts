import { afterEach, describe, expect, it, vi } from "vitest";
import { ApiError, get, postWithProgress } from "./client";

describe("request", () => {
  afterEach(() => vi.unstubAllGlobals());

  it("says in words that the server did not answer, instead of the browser's 'Failed to fetch'", async () => {
    vi.stubGlobal("fetch", vi.fn(async () => Promise.reject(new TypeError("Failed to fetch"))));
    const err = await get("/api/runs").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).status).toBe(0);
    expect((err as ApiError).message).toMatch(/^no answer from the server \(is `lorastudio serve` running/);
    expect((err as ApiError).message).toContain("Failed to fetch");
  });
});

/** nginx's own error page, as it answers in front of the studio. */
const nginxPage = (title: string) =>
  `<html>\r\n<head><title>${title}</title></head>\r\n<body>\r\n<center><h1>${title}</h1></center>\r\n<hr><center>nginx/1.22.1</center>\r\n</body>\r\n</html>\r\n`;

describe("an answer of a proxy in front of the studio", () => {
  afterEach(() => vi.unstubAllGlobals());

  it("is told in words, not shown as the proxy's HTML page", async () => {
    vi.stubGlobal(
      "fetch",
      vi.fn(async () => new Response(nginxPage("502 Bad Gateway"), { status: 502, headers: { "Content-Type": "text/html" } })),
    );
    const err = (await get("/api/runs").catch((e: unknown) => e)) as ApiError;
    expect(err.status).toBe(502);
    expect(err.message).toBe(
      "502 Bad Gateway, answered by a proxy or gateway in front of the studio, not by lorastudio: it got no answer from the studio (is `lorastudio serve` running?)",
    );
  });

  it("says that a proxy's read timeout (504) cut the request, and what that does to a generation", async () => {
    vi.stubGlobal("fetch", vi.fn(async () => new Response(nginxPage("504 Gateway Time-out"), { status: 504 })));
    const err = (await get("/api/runs").catch((e: unknown) => e)) as ApiError;
    expect(err.message).toMatch(/^504 Gateway Time-out, answered by a proxy .*proxy_read_timeout.*generation/);
  });

  it("names the proxy's body limit for an upload it refused (413)", async () => {
    class TooLarge {
      status = 413;
      statusText = "Request Entity Too Large";
      responseText = nginxPage("413 Request Entity Too Large");
      upload = { onprogress: null };
      onload: null | (() => void) = null;
      onerror: null | (() => void) = null;
      open() {}
      setRequestHeader() {}
      getResponseHeader() {
        return null;
      }
      send() {
        this.onload?.();
      }
    }
    vi.stubGlobal("XMLHttpRequest", TooLarge);
    const err = (await postWithProgress("/api/datasets/d/files", new FormData(), () => undefined, null).catch(
      (e: unknown) => e,
    )) as ApiError;
    expect(err.status).toBe(413);
    expect(err.message).toMatch(/^413 Request Entity Too Large, answered by a proxy .*client_max_body_size/);
    expect(err.message).not.toContain("<");
  });
});
