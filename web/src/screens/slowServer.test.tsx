/**
 * What a slow server shows (RELIABILITY 1414): Runs, Models and a dataset's page were blank (or
 * showed only their forms) until their list came, as if there were nothing; each now says it is
 * loading, and the list replaces that line once it comes.
 */
import { screen, waitFor } from "@testing-library/react";
import { afterEach, describe, expect, it, vi } from "vitest";
import { deferFetch, INFO, stoppedRun } from "../test/fixtures";
import { renderWithProviders } from "../test/render";
import { DatasetDetailScreen } from "./DatasetDetailScreen";
import { ModelsScreen } from "./ModelsScreen";
import { RunsScreen } from "./RunsScreen";

afterEach(() => vi.unstubAllGlobals());

describe("a slow server", () => {
  it("Runs says it is loading until the runs come", async () => {
    vi.stubGlobal("EventSource", class { close() {} addEventListener() {} });
    const { held } = deferFetch(({ url }) =>
      url.startsWith("/api/train/status") ? { body: { job: null, queue: [], busy: false, event_seq: 0 } } : undefined,
    );
    renderWithProviders(<RunsScreen />);
    expect(await screen.findByTestId("runs-loading")).toHaveTextContent("Loading the runs…");
    await waitFor(() => held(/^\/api\/runs/).answer({ runs: [stoppedRun()], total: 1, next_cursor: null }));
    expect(await screen.findByText("portrait")).toBeInTheDocument();
    expect(screen.queryByTestId("runs-loading")).toBeNull();
  });

  it("Models says it is loading until the catalogue comes", async () => {
    const { held } = deferFetch(({ url }) => (url === "/api/models/fetches" ? { body: { fetches: [] } } : undefined));
    renderWithProviders(<ModelsScreen />, { training: false });
    expect(await screen.findByTestId("models-loading")).toHaveTextContent("Loading the models…");
    await waitFor(() => held("/api/models").answer([]));
    expect(await screen.findByText("No base models yet")).toBeInTheDocument();
    expect(screen.queryByTestId("models-loading")).toBeNull();
  });

  it("a dataset's page says it is loading its images, not that it has none", async () => {
    const { held } = deferFetch(({ url }) => (url === "/api/info" ? { body: INFO } : undefined));
    renderWithProviders(<DatasetDetailScreen name="shapes" />, { training: false });
    expect(await screen.findByTestId("dataset-loading")).toHaveTextContent("Loading its images…");
    await waitFor(() => held(/^\/api\/datasets\/shapes/).answer({ detail: "not found" }, 404));
    expect(await screen.findByText(/New dataset: drop images/)).toBeInTheDocument();
    expect(screen.queryByTestId("dataset-loading")).toBeNull();
  });
});
