/** A model download told to a screen reader (RELIABILITY 1913): its start and its end, in a polite
 * live region there before the first download; not its bytes, not the ended downloads listed on opening. */
import { render, screen } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import type { Fetch } from "../api/types";
import { FetchProgress } from "./FetchProgress";

const fetch = (over: Partial<Fetch> = {}): Fetch => ({
  id: "f1", repo_id: "acme/model", revision: null, status: "running", commit: "abc", family: "flux", files_done: 1, files_total: 4,
  bytes_done: 1024, bytes_total: 4096, model_id: null, path: null, error: null, resumable: false, already_present: false, offline: false,
  created_at: "2025-01-01T00:00:00Z", finished_at: null, ...over,
});
const OLD = fetch({ id: "f0", repo_id: "acme/old", status: "completed" });

describe("FetchProgress announcements", () => {
  it("says a download's start and how it ended, not its bytes nor the downloads that ended before", () => {
    const { rerender } = render(<FetchProgress fetches={[]} onCancel={() => undefined} />);
    const said = screen.getByRole("status");
    expect(said).toHaveTextContent(/^$/);
    rerender(<FetchProgress fetches={[OLD]} onCancel={() => undefined} />);
    expect(said).toHaveTextContent(/^$/); // listed, not news
    rerender(<FetchProgress fetches={[OLD, fetch()]} onCancel={() => undefined} />);
    expect(screen.getByRole("status")).toBe(said); // the same region, so its change is read
    expect(said).toHaveTextContent(/^Downloading acme\/model…$/);
    rerender(<FetchProgress fetches={[OLD, fetch({ bytes_done: 2048, files_done: 2 })]} onCancel={() => undefined} />);
    expect(said).toHaveTextContent(/^Downloading acme\/model…$/);
    rerender(<FetchProgress fetches={[OLD, fetch({ status: "completed", bytes_done: 4096 })]} onCancel={() => undefined} />);
    expect(said).toHaveTextContent(/^Download of acme\/model completed\.$/);
  });
});
