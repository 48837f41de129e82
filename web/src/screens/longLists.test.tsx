/**
 * The Datasets and Runs lists of a long-used home can be narrowed by name (RELIABILITY 1413): 40
 * datasets or 200 runs were one long table with nothing to find one by.
 */
import { screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import { matchesName } from "../components/NameFilter";
import type { RunSummary } from "../api/types";
import { INFO, mockFetch, stoppedRun } from "../test/fixtures";
import { renderWithProviders } from "../test/render";
import { DatasetsScreen } from "./DatasetsScreen";
import { RunsScreen } from "./RunsScreen";

afterEach(() => vi.unstubAllGlobals());

const names = (testId: string) =>
  [...screen.getByTestId(testId).querySelectorAll("tbody tr")].map((r) => r.querySelector("a")?.textContent);

describe("finding one of many by name", () => {
  it("narrows the Datasets list, says when nothing matches, and Escape brings every one back", async () => {
    const datasets = Array.from({ length: 12 }, (_, i) => ({
      name: i === 7 ? "Café-portraits" : `set-${i}`, path: `/d/${i}`, images: 3, captions: 3, markup_captions: 0, markup_counted: true, usable: true, problem: null,
    })); // fmt: skip
    mockFetch(({ url }) => (url === "/api/info" ? { body: { ...INFO, datasets } } : undefined));
    const { container } = renderWithProviders(<DatasetsScreen />, { training: false });
    const find = await screen.findByRole("searchbox", { name: "find datasets by name" });
    const rows = () => [...container.querySelectorAll("tbody tr")].map((r) => r.querySelector("a")?.textContent);
    expect(rows()).toHaveLength(12);
    await userEvent.type(find, "cafe\u0301 PORT"); // NFD, another case, two words
    expect(rows()).toEqual(["Café-portraits"]);
    expect(screen.getByTestId("datasets-count")).toHaveTextContent("1 of 12 datasets");
    // a live region, as the Runs search's line: a screen reader hears how many a query left (RELIABILITY 1650)
    expect(screen.getByRole("status")).toHaveTextContent("1 of 12 datasets");
    await userEvent.clear(find);
    await userEvent.type(find, "zebra");
    expect(rows()).toEqual([]);
    expect(screen.getByTestId("datasets-count")).toHaveTextContent("No dataset's name holds “zebra”.");
    // the query said back wraps: a pasted path of one long token stuck out 51 px at 320 px (RELIABILITY 1547)
    expect(screen.getByTestId("datasets-count")).toHaveClass("wrap-anywhere");
    await userEvent.keyboard("{Escape}");
    expect(find).toHaveValue("");
    expect(rows()).toHaveLength(12);
  });

  it("offers no search box on a short list", async () => {
    mockFetch(({ url }) => (url === "/api/info" ? { body: INFO } : undefined));
    renderWithProviders(<DatasetsScreen />, { training: false });
    await screen.findByText("shapes");
    expect(screen.queryByRole("searchbox")).toBeNull();
  });

  it("asks the server for the runs a search keeps (older pages too), narrowing the loaded ones meanwhile", async () => {
    // session 37 kpfix6: the search looked only at the pages loaded, so an older run was not found
    vi.stubGlobal("EventSource", class { close() {} addEventListener() {} });
    const runs: RunSummary[] = Array.from({ length: 10 }, (_, i) => stoppedRun({ id: `r${i}`, output_name: i === 3 ? "my-first-lora" : `other-${i}` }));
    const old = stoppedRun({ id: "r-old", output_name: "my-old-lora" }); // on no page loaded
    const calls = mockFetch(({ url }) => {
      if (url.startsWith("/api/train/status")) return { body: { job: null, queue: [], busy: false, event_seq: 0 } };
      const q = new URL(url, "http://x").searchParams.get("q");
      if (q && url.includes("cursor=")) return { body: { runs: [old], total: 2, next_cursor: null } };
      if (q) return { body: { runs: runs.filter((r) => r.output_name.includes(q)), total: 2, next_cursor: "3" } };
      if (url === "/api/runs" || url.startsWith("/api/runs?")) return { body: { runs, total: 250, next_cursor: "10" } };
      return undefined;
    });
    renderWithProviders(<RunsScreen />);
    const find = await screen.findByRole("searchbox", { name: "find runs by name" });
    await userEvent.type(find, "my-"); // three keystrokes, one request once the typing pauses
    expect(names("runs-table")).toEqual(["my-first-lora"]); // at once: the runs loaded, by name
    expect(screen.getByTestId("runs-found")).toHaveTextContent("Searching every run for “my-”…");
    expect(screen.getByTestId("runs-found")).toHaveClass("wrap-anywhere"); // RELIABILITY 1547
    await waitFor(() => expect(screen.getByTestId("runs-found")).toHaveTextContent("2 runs have “my-” in their name, id or base model."));
    const asked = () => calls.filter((c) => c.url.startsWith("/api/runs")).map((c) => c.url);
    expect(asked()).toEqual(["/api/runs", "/api/runs?q=my-"]);
    expect(screen.getByTestId("runs-count")).toHaveTextContent("1 of 2 runs found");
    await userEvent.click(within(screen.getByTestId("runs-count")).getByRole("button", { name: "Show more" }));
    await waitFor(() => expect(names("runs-table")).toEqual(["my-first-lora", "my-old-lora"]));
    expect(asked().at(-1)).toBe("/api/runs?cursor=3&q=my-"); // the cursor pages the matches
    await userEvent.click(find);
    await userEvent.keyboard("{Escape}"); // every run again, at once
    await waitFor(() => expect(names("runs-table")).toHaveLength(10));
    expect(screen.queryByTestId("runs-found")).toBeNull();
  });

  it("matches every word of the query, in any case", () => {
    expect(matchesName("FLUX-style-v2", "style flux")).toBe(true);
    expect(matchesName("FLUX-style-v2", "style sdxl")).toBe(false);
    expect(matchesName("anything", "  ")).toBe(true);
  });
});
