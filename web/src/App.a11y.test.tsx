/**
 * The top bar for a screen reader (RELIABILITY 795): the screen shown is the nav link marked
 * aria-current="page" (not only drawn in another colour), the nav is named, and the live badge
 * says what its numbers are.
 */
import { render, screen, waitFor, within } from "@testing-library/react";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { App } from "./App";
import { INFO, JOB, mockFetch } from "./test/fixtures";

class QuietEventSource {
  constructor(public url: string) {}
  addEventListener() {}
  close() {}
}

describe("the top bar", () => {
  beforeEach(() => {
    vi.stubGlobal("EventSource", QuietEventSource);
    mockFetch(({ url }) => {
      if (url === "/api/info") return { body: INFO };
      if (url.startsWith("/api/train/status")) {
        const job = { ...JOB, progress: { step: 40, total_steps: 200, epoch: 1, loss: 0.3, avg_loss: 0.3, lr: 1e-4, grad_norm: 1, samples_per_second: 1, peak_memory_gb: 1 } };
        return { body: { job, queue: [], busy: true, event_seq: 1 } };
      }
      if (url === "/api/runs" || url.startsWith("/api/runs?")) return { body: { runs: [] } };
      return undefined;
    });
    window.location.hash = "#/runs";
  });
  afterEach(() => vi.unstubAllGlobals());

  it("marks the current screen's link as the current page, and names the live badge", async () => {
    render(<App />);
    const nav = screen.getByRole("navigation", { name: "screens" });
    const current = within(nav).getByRole("link", { name: "Runs" });
    expect(current).toHaveAttribute("aria-current", "page");
    for (const link of within(nav).getAllByRole("link")) {
      if (link !== current) expect(link).not.toHaveAttribute("aria-current");
    }
    await waitFor(() => expect(screen.getByRole("link", { name: "training: step 40 of 200" })).toHaveAttribute("href", "#/live"));
  });
});
