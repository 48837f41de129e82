/**
 * The Live screen of a server that follows no job (session 30 web audit, RELIABILITY 873): after
 * a server restart, a tab reloaded (or opened) on Live said "No training job yet" of a studio
 * whose run had just been interrupted, while a tab that had followed the run showed it
 * interrupted. Now it names the newest run with a link to its page (where it resumes).
 */
import { screen } from "@testing-library/react";
import { afterEach, describe, expect, it, vi } from "vitest";
import { mockFetch, stoppedRun } from "../test/fixtures";
import { renderWithProviders } from "../test/render";
import { LiveScreen } from "../screens/LiveScreen";
import { newestRun } from "./NoLiveJob";

afterEach(() => vi.unstubAllGlobals());

const serve = (runs: unknown[]) =>
  mockFetch(({ url }) => {
    if (url.startsWith("/api/train/status")) return { body: { job: null, queue: [], busy: false, event_seq: 0 } };
    if (url === "/api/runs" || url.startsWith("/api/runs?")) return { body: { runs } };
    return undefined;
  });

describe("Live with no job since the server started", () => {
  it("names the newest run, interrupted by the restart, with a link to its page", async () => {
    vi.stubGlobal("EventSource", class { close() {} addEventListener() {} });
    const older = stoppedRun({ id: "old1", output_name: "first", created_at: "2025-01-01T00:00:00Z" });
    const cut = stoppedRun({ id: "new2", output_name: "audit", status: "interrupted", resume_step: 16, created_at: "2025-01-02T00:00:00Z" });
    serve([cut, older]); // as GET /api/runs lists them: newest first
    renderWithProviders(<LiveScreen />);
    expect(await screen.findByText("No training job since the server started")).toBeInTheDocument();
    expect(screen.getByRole("link", { name: "audit" })).toHaveAttribute("href", "#/runs/new2");
    expect(screen.getByTestId("no-live-job")).toHaveTextContent("The latest run, audit, is interrupted (its page resumes it from step 16).");
  });

  it("names the run the API lists first, not the one with the latest wall-clock stamp (941)", async () => {
    vi.stubGlobal("EventSource", class { close() {} addEventListener() {} });
    // the store's order (newest recorded first): "after" was made once the clock was set back an hour
    const after = stoppedRun({ id: "a2", output_name: "after", created_at: "2026-12-06T14:40:00.000+00:00" });
    const before = stoppedRun({ id: "b1", output_name: "before", created_at: "2026-12-06T15:30:00.000+00:00" });
    expect(newestRun([after, before])?.id).toBe("a2");
    expect(newestRun([])).toBeNull();
    const calls = serve([after, before]);
    renderWithProviders(<LiveScreen />);
    expect(await screen.findByRole("link", { name: "after" })).toHaveAttribute("href", "#/runs/a2");
    // one run asked for, not the newest page of a home's thousands (RELIABILITY 1221)
    expect(calls.filter((c) => c.url.startsWith("/api/runs")).map((c) => c.url)).toEqual(["/api/runs?limit=1"]);
  });

  it("says no job yet in a studio without a run", async () => {
    vi.stubGlobal("EventSource", class { close() {} addEventListener() {} });
    serve([]);
    renderWithProviders(<LiveScreen />);
    expect(await screen.findByText("No training job yet")).toBeInTheDocument();
  });
});
