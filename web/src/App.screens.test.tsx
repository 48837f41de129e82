/**
 * A change of screen for a keyboard and a screen reader user (RELIABILITY 1910): the tab's title
 * follows the route (the run page's names its run), the new screen is said in a polite live region,
 * a focus lost with the old screen (a link inside it) goes to the new screen's main, a focus on
 * the top bar stays there, and the skip link, first in the tab order, moves the focus past the bar.
 */
import { act, render, screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { App } from "./App";
import { datasetDetail, INFO, mockFetch, runDetail } from "./test/fixtures";

class QuietEventSource {
  constructor(public url: string) {}
  addEventListener() {}
  close() {}
}

const RUN = runDetail("/o/portrait");

/** Go to `hash` as a link or the Back button does (the hashchange App listens to). */
async function go(hash: string) {
  await act(async () => {
    window.location.hash = hash;
    window.dispatchEvent(new HashChangeEvent("hashchange"));
  });
}

describe("a change of screen", () => {
  beforeEach(() => {
    vi.stubGlobal("EventSource", QuietEventSource);
    mockFetch(({ url }) => {
      if (url === "/api/info") return { body: INFO };
      if (url.startsWith("/api/train/status")) return { body: { job: null, queue: [], busy: false, event_seq: 0 } };
      if (url === "/api/runs" || url.startsWith("/api/runs?")) return { body: { runs: [RUN] } };
      if (url === "/api/runs/r1") return { body: RUN };
      if (url.startsWith("/api/runs/r1/")) return { body: { samples: [], checkpoints: [], loras: [], lines: [], truncated: false, size_bytes: 0, note: null } };
      if (url.startsWith("/api/datasets/shapes")) return { body: datasetDetail("shapes") };
      if (url.startsWith("/api/datasets")) return { body: { datasets: [], root: "/d" } };
      return undefined;
    });
    window.location.hash = "#/runs";
  });
  afterEach(() => vi.unstubAllGlobals());

  it("sets the tab's title of each screen, the run page's naming its run", async () => {
    render(<App />);
    await waitFor(() => expect(document.title).toBe("Runs – lorastudio"));
    await go("#/datasets");
    expect(document.title).toBe("Datasets – lorastudio");
    await go("#/datasets/shapes");
    expect(document.title).toBe("Dataset shapes – lorastudio");
    await go("#/runs/r1");
    await waitFor(() => expect(document.title).toBe("Run portrait – lorastudio"));
    await go("#/generate");
    expect(document.title).toBe("Generate – lorastudio");
  });

  it("says the screen opened, and moves a focus lost with the old screen to the new one's main", async () => {
    render(<App />);
    const link = await screen.findByRole("link", { name: "portrait" });
    const said = screen.getByTestId("screen-announcement");
    expect(said).toHaveAttribute("role", "status");
    expect(said).toHaveTextContent(/^$/); // the first page: its title says it
    link.focus();
    await go("#/runs/r1"); // as the link's Enter does
    expect(link.isConnected).toBe(false);
    expect(document.activeElement).toBe(screen.getByRole("main"));
    expect(said).toHaveTextContent("Run");
    await userEvent.tab(); // on from the top of the new screen, not from the top of the page
    expect(screen.getByRole("main")).toContainElement(document.activeElement as HTMLElement);
  });

  it("keeps the focus on the top bar's link that changed the screen", async () => {
    render(<App />);
    const datasets = within(screen.getByRole("navigation", { name: "screens" })).getByRole("link", { name: "Datasets" });
    datasets.focus();
    await go("#/datasets");
    expect(document.activeElement).toBe(datasets);
    expect(screen.getByTestId("screen-announcement")).toHaveTextContent("Datasets");
  });

  it("skips the top bar: the skip link is the first Tab stop and moves the focus to the screen", async () => {
    render(<App />);
    await screen.findByRole("link", { name: "portrait" });
    await userEvent.tab();
    const skip = screen.getByRole("link", { name: "Skip to the screen" });
    expect(document.activeElement).toBe(skip);
    await userEvent.keyboard("{Enter}");
    expect(document.activeElement).toBe(screen.getByRole("main"));
    expect(window.location.hash).toBe("#/runs"); // the route kept
    await userEvent.tab();
    expect(screen.getByRole("main")).toContainElement(document.activeElement as HTMLElement);
  });
});
