/**
 * The Live screen's progress for a screen reader (RELIABILITY 794): a polite live region says the
 * step, loss and time left, and says it again only at each tenth of the run and at a status
 * change, not at every step (100 progress events: at most 10 announcements).
 */
import { act, render, screen, waitFor } from "@testing-library/react";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { TrainingProvider } from "../api/training";
import { JOB, mockFetch } from "../test/fixtures";
import { LiveScreen } from "./LiveScreen";
import { FakeEventSource } from "../test/fakeEventSource";

const TOTAL = 100;
const progress = (step: number) => ({
  type: "progress", job_id: "j1", step, total_steps: TOTAL, epoch: 1, loss: 1 / step, avg_loss: 0.5,
  lr: 1e-4, grad_norm: 1, samples_per_second: 2.5, peak_memory_gb: 1.5,
}); // fmt: skip

describe("Live: progress in a polite live region", () => {
  let job: object = JOB; // what /api/train/status answers
  beforeEach(() => {
    job = JOB;
    vi.stubGlobal("EventSource", FakeEventSource);
    mockFetch(({ url }) => {
      if (url.startsWith("/api/train/status")) return { body: { job, queue: [], busy: true, event_seq: 1 } };
      if (url.includes("/samples")) return { body: { samples: [] } };
      return undefined;
    });
  });
  afterEach(() => vi.unstubAllGlobals());

  it("announces the step, loss and ETA at each tenth of the run and each status change, not at every step", async () => {
    render(
      <TrainingProvider>
        <LiveScreen />
      </TrainingProvider>,
    );
    await screen.findByTestId("stat-step");
    const live = document.querySelector<HTMLElement>("[role='status'][aria-live='polite']");
    expect(live).not.toBeNull();
    expect(live).toHaveAttribute("aria-atomic", "true");
    const said: string[] = []; // the region's text after each step's render
    for (let s = 2; s <= TOTAL; s++) {
      act(() => FakeEventSource.last?.emit("progress", progress(s)));
      said.push(live!.textContent ?? "");
    }
    expect(screen.getByTestId("stat-step")).toHaveTextContent(`${TOTAL} / ${TOTAL}`);
    const texts = said.filter((t, i) => t !== said[i - 1]); // each change: one announcement
    expect(texts.length).toBeGreaterThan(0);
    expect(texts.length).toBeLessThanOrEqual(11); // 99 steps: the first, then one per tenth at most
    expect(texts[0]).toMatch(/^shapes-lora: step 2 of 100 \(2 %\), loss 0\.5(, about .* left)?\.$/);
    expect(texts).toContainEqual(expect.stringMatching(/^shapes-lora: step 10 of 100 \(10 %\), loss 0\.1[,.]/));
    expect(live).toHaveTextContent(/^shapes-lora: step 100 of 100 \(100 %\), loss 0\.01/);
    // a status change is announced at once
    job = { ...JOB, status: "stopping", steps_run: TOTAL };
    act(() => FakeEventSource.last?.emit("status", { type: "status", job_id: "j1", status: "stopping", error: null }));
    await waitFor(() => expect(live).toHaveTextContent(/^shapes-lora: stopping at step 100/));
  });
});
