import { render, screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { App } from "../App";
import { type Call, INFO, mockFetch } from "../test/fixtures";
import { browserUrl, getToken, resetAuthForTests, setToken, useAuth } from "./auth";
import { request } from "./client";

const TOKEN = "s3cret-token";
const STATUS = { job: null, queue: [], busy: false, event_seq: 0 };

/** EventSource double that records the URLs it was opened with. */
class RecordingEventSource {
  static urls: string[] = [];
  onopen = null;
  onerror = null;
  onmessage = null;
  constructor(url: string) {
    RecordingEventSource.urls.push(url);
  }
  addEventListener() {}
  close() {}
}

describe("API token", () => {
  let calls: Call[];
  beforeEach(() => {
    window.localStorage.clear();
    resetAuthForTests();
    RecordingEventSource.urls = [];
    vi.stubGlobal("EventSource", RecordingEventSource);
    // a server with LORASTUDIO_API_TOKEN set: everything is 401 without the right bearer token
    calls = mockFetch(({ url, headers }) => {
      if (headers.Authorization !== `Bearer ${TOKEN}`) return { status: 401, body: { detail: "missing or wrong API token" } };
      if (url === "/api/info") return { body: { ...INFO, auth: true } };
      if (url.startsWith("/api/session?")) return { body: { cookie: true, idle_s: 43200, max_s: 86400 } };
      if (url.startsWith("/api/train/status")) return { body: STATUS };
      if (url === "/api/runs" || url.startsWith("/api/runs?")) return { body: { runs: [] } };
      if (url === "/api/loras") return { body: { root: "/o", loras: [] } };
      return undefined;
    });
    window.location.hash = "#/runs";
  });
  afterEach(() => {
    vi.unstubAllGlobals();
    window.localStorage.clear();
    resetAuthForTests();
  });

  it("asks once after a 401, keeps the token, sends it as a header and never in a URL", async () => {
    render(<App />);
    const dialog = await screen.findByRole("dialog", { name: "API token required" });
    expect(dialog).toBeInTheDocument();
    expect(screen.queryByText(/Cannot load the studio's information/)).toBeNull();
    await userEvent.type(screen.getByLabelText("API token"), TOKEN);
    await userEvent.click(screen.getByRole("button", { name: "Save token" }));

    await waitFor(() => expect(screen.queryByRole("dialog")).toBeNull());
    expect(window.localStorage.getItem("lorastudio.token")).toBe(TOKEN);
    // the screens reload with the token: the empty run history shows, info is fetched again
    expect(await screen.findByText(/No runs yet/)).toBeInTheDocument();
    const authed = calls.filter((c) => c.headers.Authorization === `Bearer ${TOKEN}`).map((c) => c.url);
    expect(authed).toEqual(expect.arrayContaining(["/api/info", "/api/runs"]));
    // the event stream is reopened without the token in its URL (it carried `?token=`, which a
    // proxy's access log kept), once the browser session the token opened has set its cookie
    await waitFor(() => expect(RecordingEventSource.urls.at(-1)).toBe("/api/train/events"));
    const opened = calls.findIndex((c) => c.method === "POST" && c.url.startsWith("/api/session?"));
    expect(opened).toBeGreaterThanOrEqual(0);
    expect(calls[opened].headers.Authorization).toBe(`Bearer ${TOKEN}`);
    expect(calls[opened].url).toBe("/api/session?path=%2F"); // the cookie's Path: the page's folder
    expect(RecordingEventSource.urls.every((u) => !u.includes("token"))).toBe(true);
    expect(calls.every((c) => !c.url.includes(TOKEN))).toBe(true);
    expect(browserUrl("/gallery/a.png")).toBe("/gallery/a.png");
    expect(browserUrl("/x?size=64")).toBe("/x?size=64");
  });

  it("a saved token that the server refuses is asked for again, with the reason", async () => {
    window.localStorage.setItem("lorastudio.token", "old-token");
    resetAuthForTests();
    render(<App />);
    const dialog = await screen.findByRole("dialog", { name: "API token required" });
    expect(within(dialog).getByRole("alert")).toHaveTextContent("refused the saved token");
    // RELIABILITY 1918: the refusal is the field's, read with it, and marks it invalid
    const field = within(dialog).getByLabelText(/^API token/);
    expect(field).toHaveAttribute("aria-invalid", "true");
    expect(field).toHaveAccessibleDescription("The server refused the saved token. Enter the current one.");
    expect(field).toHaveFocus();
    expect(calls[0].headers.Authorization).toBe("Bearer old-token");
  });

  it("a 401 to a request sent with an older token does not ask again for the token saved since", async () => {
    // the fetch with the wrong token is still in flight when the user saves the right one
    let answer: (r: Response) => void = () => undefined;
    vi.stubGlobal("fetch", () => new Promise<Response>((resolve) => (answer = resolve)));
    setToken("wrong");
    const slow = request("GET", "/api/train/status").catch(() => undefined);
    setToken(TOKEN);
    answer(new Response(JSON.stringify({ detail: "missing or wrong API token" }), { status: 401 }));
    await slow;
    expect(getToken()).toBe(TOKEN);
    let seen = { needed: true, refused: true };
    function Probe() {
      seen = useAuth();
      return null;
    }
    render(<Probe />);
    expect(seen).toMatchObject({ needed: false, refused: false });
    // a 401 to a request that carried the current token still asks
    vi.stubGlobal("fetch", async () => new Response("{}", { status: 401 }));
    await request("GET", "/api/train/status").catch(() => undefined);
    await waitFor(() => expect(seen).toMatchObject({ needed: true, refused: true }));
  });
});
