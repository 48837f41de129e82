/**
 * Deleting a run record whose output folder a resumed record shares asked "Delete run NAME and its
 * files?" and then kept the files (the other record uses them), so the question said more than
 * was done (session 36 journey). The Runs list and the run's page now word it from the API's
 * `shared_with` (session 37 kpfix6).
 */
import { render, screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import { deleteQuestion } from "../lib/runDelete";
import { mockFetch, runDetail, stoppedRun } from "../test/fixtures";
import { renderWithProviders } from "../test/render";
import { RunDetailScreen } from "./RunDetailScreen";
import { RunsScreen } from "./RunsScreen";

afterEach(() => vi.unstubAllGlobals());

const SHARED = "Delete this record of run portrait? Its files stay: another record of it (r2) uses the same folder, and they go with the last record of it.";

describe("the question before a run's delete", () => {
  it("says the files stay where another record shares the folder", () => {
    expect(deleteQuestion({ output_name: "portrait", shared_with: [] })).toBe("Delete run portrait and its files?");
    expect(deleteQuestion({ output_name: "portrait" })).toBe("Delete run portrait and its files?"); // an older server
    expect(deleteQuestion({ output_name: "portrait", shared_with: ["r2"] })).toBe(SHARED);
    expect(deleteQuestion({ output_name: "p", shared_with: ["a", "b"] })).toContain("2 other records of it (a, b) use the same folder");
  });

  it("is asked so on the Runs list and on the run's page", async () => {
    vi.stubGlobal("EventSource", class { close() {} addEventListener() {} });
    const asked = vi.fn(() => false);
    vi.stubGlobal("confirm", asked);
    const runs = [stoppedRun({ id: "r1", shared_with: ["r2"] }), stoppedRun({ id: "r3", output_name: "other" })];
    mockFetch(({ url }) => {
      if (url.startsWith("/api/train/status")) return { body: { job: null, queue: [], busy: false, event_seq: 0 } };
      if (url === "/api/runs") return { body: { runs, total: 2, next_cursor: null } };
      if (url === "/api/runs/r1") return { body: { ...runDetail(), shared_with: ["r2"] } };
      if (url.startsWith("/api/runs/r1/samples")) return { body: { samples: [], total: 0, next_cursor: null } };
      return undefined;
    });
    const list = renderWithProviders(<RunsScreen />);
    const table = await screen.findByTestId("runs-table");
    const deletes = within(table).getAllByRole("button", { name: /^Delete: / });
    await userEvent.click(deletes[0]);
    expect(asked).toHaveBeenLastCalledWith(SHARED);
    await userEvent.click(deletes[1]);
    expect(asked).toHaveBeenLastCalledWith("Delete run other and its files?");
    list.unmount();
    render(<RunDetailScreen id="r1" />);
    await userEvent.click(await screen.findByRole("button", { name: "Delete" }));
    await waitFor(() => expect(asked).toHaveBeenCalledTimes(3));
    expect(asked).toHaveBeenLastCalledWith(SHARED);
  });
});
