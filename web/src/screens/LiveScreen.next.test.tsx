/**
 * Live after a run ends says where to go next: the run's page (Resume, Train longer, Clone, its
 * files), which Live itself does not offer (RELIABILITY 1411).
 */
import { render, screen } from "@testing-library/react";
import { afterEach, describe, expect, it, vi } from "vitest";
import { TrainingProvider } from "../api/training";
import { FakeEventSource } from "../test/fakeEventSource";
import { JOB, mockFetch } from "../test/fixtures";
import { LiveScreen } from "./LiveScreen";

function renderWith(job: Record<string, unknown>) {
  vi.stubGlobal("EventSource", FakeEventSource);
  mockFetch(({ url }) => {
    if (url.startsWith("/api/train/status")) return { body: { job: { ...JOB, ...job }, queue: [], busy: false, event_seq: 1 } };
    if (url.includes("/samples")) return { body: { samples: [] } };
    return undefined;
  });
  render(
    <TrainingProvider>
      <LiveScreen />
    </TrainingProvider>,
  );
}

describe("Live: what comes after a run", () => {
  afterEach(() => {
    vi.restoreAllMocks();
    vi.unstubAllGlobals();
  });

  it.each(["stopped", "completed", "failed", "interrupted"])("a %s run links to its page", async (status) => {
    renderWith({ id: "run 7", status, finished_at: "2025-01-01T00:10:00Z", lora_path: status === "failed" ? null : "/o/shapes-lora.safetensors" });
    const next = await screen.findByTestId("live-run-page");
    expect(next).toHaveTextContent("resume, train longer");
    expect(screen.getByRole("link", { name: "the page of shapes-lora" })).toHaveAttribute("href", "#/runs/run%207");
  });

  it("a running run has no such line (Stop is what it offers)", async () => {
    renderWith({});
    await screen.findByRole("button", { name: "Stop" });
    expect(screen.queryByTestId("live-run-page")).toBeNull();
  });
});
