import { screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { beforeEach, describe, expect, it, vi } from "vitest";
import type { GalleryImage, Lora } from "../api/types";
import { type Call, INFO, mockFetch } from "../test/fixtures";
import { GenerateScreen } from "./GenerateScreen";
import { renderWithProviders } from "../test/render";

// RELIABILITY 1280: GET /api/loras pages (limit, cursor, total, next_cursor) and filters on the
// server (q: a part of the name; name: exact names); the picker asks for a page, not every LoRA
const lora = (name: string): Lora => ({ name, family: "flux", path: `/o/${name}/${name}.safetensors`, bytes: 2048, modified: 1, sidecar: null, weights: "raw" });
const ALL = ["cats", "dogs", "owls", "bats", "mice"]; // newest first; a page holds 2
const REUSED: GalleryImage = {
  file: "old.png",
  url: "/gallery/old.png",
  created: 1,
  prompt: "an old owl",
  seed: 1,
  family: "flux",
  loras: [
    { name: "owls", scale: 0.5 }, // on the second page
    { name: "gone", scale: 1 }, // deleted since
  ],
};

/** The server's answer to a GET /api/loras URL over ALL (pages of 2, cursor: the page's last name). */
function answer(url: string) {
  const q = new URL(url, "http://x").searchParams;
  const names = q.getAll("name");
  const kept = ALL.filter((n) => (!q.get("q") || n.includes(q.get("q") ?? "")) && (!names.length || names.includes(n)));
  const from = q.get("cursor") ? kept.indexOf(q.get("cursor") ?? "") + 1 : 0;
  const page = names.length ? kept : kept.slice(from, from + 2);
  const more = !names.length && from + 2 < kept.length;
  return { root: "/o", loras: page.map(lora), total: kept.length, next_cursor: more ? page[page.length - 1] : null };
}

describe("GenerateScreen: the LoRA picker's pages and search", () => {
  let calls: Call[];
  beforeEach(() => {
    vi.unstubAllGlobals();
    calls = mockFetch(({ url }) => {
      if (url === "/api/info") return { body: INFO };
      if (url.startsWith("/api/train/status")) return { body: { job: null, queue: [], busy: false, event_seq: 0 } };
      if (url.startsWith("/api/loras?")) return { body: answer(url) };
      if (url === "/api/gallery") return { body: { images: [REUSED] } };
      return undefined;
    });
  });
  const lorasAsked = () => calls.filter((c) => c.url.startsWith("/api/loras?")).map((c) => c.url);

  it("shows the first page and its count, and Show more adds the next page", async () => {
    renderWithProviders(<GenerateScreen />);
    await screen.findByLabelText("use LoRA dogs");
    expect(screen.queryByLabelText("use LoRA owls")).toBeNull();
    expect(screen.getByTestId("loras-count")).toHaveTextContent("2 of 5 LoRAs");
    expect(lorasAsked()).toEqual(["/api/loras?family=flux"]); // an old server's request: the first page
    await userEvent.click(within(screen.getByTestId("loras-count")).getByRole("button", { name: "Show more" }));
    await screen.findByLabelText("use LoRA bats");
    expect(lorasAsked()).toContain("/api/loras?family=flux&cursor=dogs");
    await userEvent.click(within(screen.getByTestId("loras-count")).getByRole("button", { name: "Show more" }));
    await screen.findByLabelText("use LoRA mice");
    expect(screen.getAllByRole("checkbox", { name: /^use LoRA/ }).map((c) => c.getAttribute("aria-label"))).toEqual(ALL.map((n) => `use LoRA ${n}`));
    expect(screen.queryByTestId("loras-count")).toBeNull(); // every LoRA shown
  });

  it("reads a failed Show more's reason with the button (RELIABILITY 2060)", async () => {
    calls = mockFetch(({ url }) => {
      if (url === "/api/info") return { body: INFO };
      if (url.startsWith("/api/train/status")) return { body: { job: null, queue: [], busy: false, event_seq: 0 } };
      if (url.includes("cursor=")) return { status: 500, body: { detail: "disk gone" } };
      if (url.startsWith("/api/loras?")) return { body: answer(url) };
      if (url === "/api/gallery") return { body: { images: [] } };
      return undefined;
    });
    renderWithProviders(<GenerateScreen />);
    await screen.findByLabelText("use LoRA dogs");
    const more = within(screen.getByTestId("loras-count")).getByRole("button", { name: "Show more" });
    expect(more).toHaveAccessibleDescription("");
    await userEvent.click(more);
    const alert = await screen.findByText(/^Cannot load more LoRAs: /);
    expect(alert).toHaveAttribute("role", "alert");
    expect(more).toHaveAccessibleDescription(alert.textContent ?? "");
  });

  it("searches the names on the server and says when none holds the text", async () => {
    renderWithProviders(<GenerateScreen />);
    await screen.findByLabelText("use LoRA dogs");
    const search = screen.getByRole("searchbox", { name: "search the flux LoRAs by name" });
    await userEvent.type(search, "ow");
    await screen.findByLabelText("use LoRA owls");
    await waitFor(() => expect(screen.queryByLabelText("use LoRA cats")).toBeNull());
    expect(lorasAsked()).toContain("/api/loras?family=flux&q=ow");
    await userEvent.type(search, "zz");
    expect(await screen.findByText("No flux LoRA's name holds “owzz”.")).toBeInTheDocument();
  });

  it("keeps a reused image's pick on no page shown ticked, and calls missing only one the server lacks", async () => {
    renderWithProviders(<GenerateScreen />);
    const item = within(await screen.findByTestId("gallery")).getByRole("button", { name: /an old owl/ });
    await screen.findByLabelText("use LoRA dogs");
    await userEvent.click(item);
    await userEvent.click(screen.getByRole("button", { name: "Reuse these settings" }));
    expect(await screen.findByLabelText("use LoRA owls")).toBeChecked();
    expect(screen.getByLabelText("scale of owls")).toHaveValue("0.5");
    expect(lorasAsked()).toContain("/api/loras?family=flux&name=gone&name=owls");
    const missing = await screen.findByTestId("missing-loras");
    expect(missing).toHaveTextContent("gone");
    expect(missing).not.toHaveTextContent("owls");
  });
});
