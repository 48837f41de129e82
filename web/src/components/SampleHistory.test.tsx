import { render, screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import { api } from "../api/endpoints";
import { mockFetch } from "../test/fixtures";
import { SampleHistory } from "./SampleHistory";

const PROMPTS = ["a red circle", "a blue square"];
const file = (step: number, index: number) => {
  const name = `step-${String(step).padStart(6, "0")}-${index}.png`;
  return { step, index, prompt: PROMPTS[index], name, url: `/api/runs/j1/samples/${name}` };
};

afterEach(() => vi.unstubAllGlobals());

describe("SampleHistory", () => {
  it("shows the stored rounds side by side and adds new rounds from events without fetching again", async () => {
    const calls = mockFetch(({ url }) =>
      url === "/api/runs/j1/samples?limit=20" ? { body: { samples: [file(200, 1), file(100, 0), file(100, 1), file(200, 0)] } } : undefined,
    );
    const { rerender } = render(<SampleHistory runId="j1" latest={null} prompts={PROMPTS} />);
    const table = await screen.findByRole("table");
    expect(within(table).getAllByRole("columnheader").map((h) => h.textContent)).toEqual(["Prompt", "step 100", "step 200"]); // the corner named for a screen reader (792)
    // the table scrolls sideways as rounds come: a named region a keyboard reaches to scroll it (793)
    const region = screen.getByRole("region", { name: "sample history" });
    expect(region).toContainElement(table);
    expect(region.tabIndex).toBe(0);
    const rows = within(table).getAllByRole("row").slice(1);
    expect(rows.map((r) => within(r).getByRole("rowheader").textContent)).toEqual(PROMPTS);
    expect(within(rows[1]).getByAltText("a blue square, step 200")).toHaveAttribute("src", "/api/runs/j1/samples/step-000200-1.png");

    rerender(<SampleHistory runId="j1" latest={{ step: 300, images: ["samples/step-000300-0.png", "samples/step-000300-1.png"] }} prompts={PROMPTS} />);
    await waitFor(() => expect(within(table).getAllByRole("columnheader")).toHaveLength(4));
    expect(screen.getByAltText("a red circle, step 300")).toHaveAttribute("src", "/api/runs/j1/samples/step-000300-0.png");
    expect(calls.filter((c) => c.url === "/api/runs/j1/samples?limit=20")).toHaveLength(1);
  });

  it("stays hidden until there are two rounds to compare", async () => {
    const calls = mockFetch(() => undefined); // no samples stored yet (404)
    render(<SampleHistory runId="j1" latest={{ step: 100, images: ["samples/step-000100-0.png"] }} prompts={PROMPTS} />);
    await waitFor(() => expect(calls).toHaveLength(1));
    expect(screen.queryByTestId("sample-history")).toBeNull();
  });

  it("a long run's history is not drawn again at each step of the Live screen (RELIABILITY 1293)", async () => {
    // 100 rounds of 2 prompts: the Live screen renders at every progress event, its prompts a new
    // array each time; before, every such render rebuilt the table and searched the listing once a cell
    const stored = Array.from({ length: 100 }, (_, r) => [file(100 * (r + 1), 0), file(100 * (r + 1), 1)]).flat();
    mockFetch(({ url }) => (url === "/api/runs/j1/samples?limit=20" ? { body: { samples: stored } } : undefined));
    const { rerender } = render(<SampleHistory runId="j1" latest={null} prompts={[...PROMPTS]} />);
    await waitFor(() => expect(screen.getAllByRole("columnheader")).toHaveLength(101));
    const urls = vi.spyOn(api, "imageUrl");
    rerender(<SampleHistory runId="j1" latest={null} prompts={[...PROMPTS]} />); // a step: the same rounds
    expect(urls).not.toHaveBeenCalled(); // old: 400 calls (the table's every cell, its listing twice)
    const next = { step: 10_100, images: ["samples/step-010100-0.png", "samples/step-010100-1.png"] };
    rerender(<SampleHistory runId="j1" latest={next} prompts={[...PROMPTS]} />); // a new round: drawn
    await waitFor(() => expect(screen.getAllByRole("columnheader")).toHaveLength(102));
    expect(screen.getByAltText("a blue square, step 10100")).toHaveAttribute("src", "/api/runs/j1/samples/step-010100-1.png");
  });

  it("shows the newest rounds and loads the older ones on request (RELIABILITY 1341)", async () => {
    // before, the table read the run's whole listing at once: 400 rounds of 4 previews were 553 KB
    const page = (steps: number[], next: string | null) => ({
      body: { samples: steps.flatMap((s) => [file(s, 0), file(s, 1)]), total: 3, next_cursor: next },
    });
    const calls = mockFetch(({ url }) =>
      url === "/api/runs/j1/samples?limit=20" ? page([200, 300], "200") : url === "/api/runs/j1/samples?limit=20&cursor=200" ? page([100], null) : undefined,
    );
    render(<SampleHistory runId="j1" latest={null} prompts={PROMPTS} />);
    const table = await screen.findByRole("table");
    const headers = () => within(table).getAllByRole("columnheader").map((h) => h.textContent);
    expect(headers()).toEqual(["Prompt", "step 200", "step 300"]);
    expect(screen.getByText(/The newest 2 of 3 rounds/)).toBeInTheDocument();
    await userEvent.click(screen.getByRole("button", { name: "Show older rounds" }));
    await waitFor(() => expect(headers()).toEqual(["Prompt", "step 100", "step 200", "step 300"]));
    expect(screen.queryByRole("button", { name: "Show older rounds" })).toBeNull();
    // the button gone with the last page: the focus on the line that says so, not the page's start (RELIABILITY 1549)
    expect(screen.getByText("All 3 rounds shown.")).toHaveFocus();
    expect(calls.map((c) => c.url)).toEqual(["/api/runs/j1/samples?limit=20", "/api/runs/j1/samples?limit=20&cursor=200"]);
  });
  it("counts the rounds a live run added since its first page, and a failed older page is its run's alone (RELIABILITY 1544)", async () => {
    const page = (run: string, steps: number[], next: string | null) => ({
      body: { samples: steps.flatMap((s) => [file(s, 0), file(s, 1)]).map((f) => ({ ...f, url: f.url.replace("j1", run) })), total: 3, next_cursor: next },
    });
    mockFetch(({ url }) =>
      url === "/api/runs/j1/samples?limit=20"
        ? page("j1", [200, 300], "200")
        : url === "/api/runs/j2/samples?limit=20"
          ? page("j2", [200, 300], "200")
          : url === "/api/runs/j1/samples?limit=20&cursor=200"
            ? { status: 500, body: { detail: "disk gone" } }
            : undefined,
    );
    const { rerender } = render(<SampleHistory runId="j1" latest={null} prompts={PROMPTS} />);
    await screen.findByText(/The newest 2 of 3 rounds/);
    const next = { step: 400, images: ["samples/step-000400-0.png", "samples/step-000400-1.png"] };
    rerender(<SampleHistory runId="j1" latest={next} prompts={PROMPTS} />);
    await waitFor(() => expect(screen.getAllByRole("columnheader")).toHaveLength(4));
    expect(screen.getByText(/The newest 3 of 4 rounds/)).toBeInTheDocument(); // was "3 of 3"
    await userEvent.click(screen.getByRole("button", { name: "Show older rounds" }));
    expect(await screen.findByRole("alert")).toHaveTextContent("Cannot load older rounds: disk gone");
    // read with the button that failed, when a keyboard user is back on it (RELIABILITY 2060)
    expect(screen.getByRole("button", { name: "Show older rounds" })).toHaveAccessibleDescription("Cannot load older rounds: disk gone");
    rerender(<SampleHistory runId="j2" latest={null} prompts={PROMPTS} />); // another run in the same table
    await screen.findByAltText("a red circle, step 200");
    await waitFor(() => expect(screen.getByAltText("a red circle, step 200")).toHaveAttribute("src", "/api/runs/j2/samples/step-000200-0.png"));
    expect(screen.queryByRole("alert")).toBeNull(); // was j1's error under j2's rounds
  });
});
