import { describe, expect, it } from "vitest";
import type { RunSummary } from "../api/types";
import { newestRun } from "./NoLiveJob";

const run = (id: string, created_at: string) => ({ id, output_name: id, status: "stopped", created_at }) as unknown as RunSummary;

describe("newestRun", () => {
  it("names the run the API lists first, not the one with the latest wall-clock stamp (941)", () => {
    // the store's order (newest recorded first): "after" was made after the clock was set back an hour
    const listed = [run("after", "2026-12-06T14:40:00.000+00:00"), run("before", "2026-12-06T15:30:00.000+00:00")];
    expect(newestRun(listed)?.id).toBe("after");
    expect(newestRun([])).toBeNull();
  });
});
