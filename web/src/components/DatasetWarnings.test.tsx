/** The dataset warnings a run said when it started (RELIABILITY 847): on its page and on the Live
 * screen, as the preflight words them, apart from the run's own warnings (what failed). */
import { render, screen, within } from "@testing-library/react";
import { afterEach, describe, expect, it, vi } from "vitest";
import { TrainingProvider } from "../api/training";
import { JOB, mockFetch, runDetail } from "../test/fixtures";
import { LiveScreen } from "../screens/LiveScreen";
import { RunDetailScreen } from "../screens/RunDetailScreen";
import { FakeEventSource } from "../test/fakeEventSource";

const SAID = [
  "2 image(s) are cut by more than 20% to the crop of their bucket: a.png (33% cut), b.png (33% cut)",
  "1 validation image(s) are also training images: again.png (= a.png)",
];

afterEach(() => vi.unstubAllGlobals());

describe("a run's dataset warnings", () => {
  it("are listed on the run's page", async () => {
    mockFetch(({ url }) => {
      if (url === "/api/runs/r1") return { body: { ...runDetail(), dataset_warnings: SAID } };
      if (url === "/api/runs/r1/samples") return { body: { samples: [] } };
      if (url === "/api/runs/r1/checkpoints") return { body: { checkpoints: [], resume_step: null } };
      if (url.startsWith("/api/runs/r1/log?")) return { body: { lines: [], truncated: false, size_bytes: 0, note: null } };
      return undefined;
    });
    render(<RunDetailScreen id="r1" />);
    const list = await screen.findByRole("region", { name: "dataset warnings" });
    expect(within(list).getAllByTestId("dataset-warning").map((w) => w.textContent)).toEqual(SAID.map((w) => `Dataset: ${w}`));
    expect(screen.queryByTestId("run-warning")).toBeNull(); // nothing failed
  });

  it("are listed on the Live screen, and nothing when there is none", async () => {
    vi.stubGlobal("EventSource", FakeEventSource);
    let job: object = { ...JOB, dataset_warnings: SAID };
    mockFetch(({ url }) => {
      if (url.startsWith("/api/train/status")) return { body: { job, queue: [], busy: true, event_seq: 1 } };
      if (url.includes("/samples")) return { body: { samples: [] } };
      return undefined;
    });
    const view = render(
      <TrainingProvider>
        <LiveScreen />
      </TrainingProvider>,
    );
    expect(await screen.findAllByTestId("dataset-warning")).toHaveLength(2);
    view.unmount();
    job = { ...JOB, dataset_warnings: [] };
    render(
      <TrainingProvider>
        <LiveScreen />
      </TrainingProvider>,
    );
    await screen.findByTestId("stat-step");
    expect(screen.queryByRole("region", { name: "dataset warnings" })).toBeNull();
  });
});
