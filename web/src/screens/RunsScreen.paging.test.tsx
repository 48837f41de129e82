/**
 * The Runs page of a home with hundreds of runs (session 34 home at scale audit, RELIABILITY
 * 1221): GET /api/runs listed the newest 200 runs and no others, so older runs could not be
 * opened or deleted. The page renders one page of rows, says how many runs there are, and "Show
 * more" asks for the next page by its cursor; a reload asks for as many runs as are shown.
 */
import { screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { RunSummary } from "../api/types";
import { mockFetch, stoppedRun } from "../test/fixtures";
import { renderWithProviders } from "../test/render";
import { RUNS_PAGE, RunsScreen } from "./RunsScreen";

afterEach(() => vi.unstubAllGlobals());

const TOTAL = 230; // a page and a bit: rendering hundreds of rows costs seconds in jsdom
const RUNS: RunSummary[] = Array.from({ length: TOTAL }, (_, i) =>
  stoppedRun({ id: `r${TOTAL - i}`, output_name: `run-${TOTAL - i}` }),
);

/** GET /api/runs as the server pages it: `limit` (default RUNS_PAGE) after `cursor` (an index here). */
function page(url: string) {
  const query = new URL(url, "http://x").searchParams;
  const start = Number(query.get("cursor") ?? 0);
  const limit = Number(query.get("limit") ?? RUNS_PAGE);
  const end = Math.min(start + limit, TOTAL);
  return { runs: RUNS.slice(start, end), total: TOTAL, next_cursor: end < TOTAL ? String(end) : null };
}

// DOM queries, not role queries: those walk hundreds of rows' accessibility tree (seconds in jsdom)
const rows = () => screen.getByTestId("runs-table").querySelectorAll("tbody tr").length;

describe("the Runs page of a long-used home", () => {
  it("renders a page of rows and shows the older runs a page at a time", async () => {
    vi.stubGlobal("EventSource", class { close() {} addEventListener() {} });
    const calls = mockFetch(({ url }) => {
      if (url.startsWith("/api/train/status")) return { body: { job: null, queue: [], busy: false, event_seq: 0 } };
      if (url === "/api/runs" || url.startsWith("/api/runs?")) return { body: page(url) };
      return undefined;
    });
    renderWithProviders(<RunsScreen />);
    expect(await screen.findByText(`run-${TOTAL}`)).toBeInTheDocument();
    expect(rows()).toBe(RUNS_PAGE); // not the whole history
    expect(screen.getByTestId("runs-count")).toHaveTextContent(`${RUNS_PAGE} of ${TOTAL} runs`);

    const more = () => screen.getByTestId("runs-count").querySelector("button") as HTMLButtonElement;
    expect(more()).toHaveTextContent("Show more");
    await userEvent.click(more());
    await waitFor(() => expect(rows()).toBe(TOTAL));
    expect(screen.getByText("run-1")).toBeInTheDocument(); // the oldest run, past the first 200
    expect(screen.getByTestId("runs-count").querySelector("button")).toBeNull();
    const asked = calls.filter((c) => c.url.startsWith("/api/runs")).map((c) => c.url);
    expect(asked).toEqual(["/api/runs", `/api/runs?cursor=${RUNS_PAGE}`]);

    await userEvent.click(screen.getByText("Refresh")); // one request for all shown
    await waitFor(() => expect(calls.at(-1)?.url).toBe(`/api/runs?limit=${TOTAL}`));
    await waitFor(() => expect(rows()).toBe(TOTAL));
    const names = [...screen.getByTestId("runs-table").querySelectorAll("tbody tr td:first-child a")].map((a) => a.textContent);
    expect(new Set(names).size).toBe(TOTAL);
  });
});
