import { describe, expect, it } from "vitest";
import { formatDuration, runDuration } from "./format";

describe("runDuration", () => {
  it("is the server's monotonic elapsed_s, not the wall-clock stamps a clock step moved (RELIABILITY 1097)", () => {
    // the clock set back an hour mid-run: the stamps say -59m 30s, the run ran 30 s
    const stepped = { started_at: "2026-12-07T10:00:00+00:00", finished_at: "2026-12-07T09:00:30+00:00", elapsed_s: 30.4 };
    expect(formatDuration(runDuration(stepped))).toBe("30s");
    // a run recorded without it (an older version's, or killed outright): the stamps, as before
    expect(formatDuration(runDuration({ started_at: "2026-12-07T10:00:00Z", finished_at: "2026-12-07T10:02:05Z", elapsed_s: null }))).toBe("2m 05s");
    expect(formatDuration(runDuration({ started_at: "2026-12-07T10:00:00Z", finished_at: "2026-12-07T10:00:07Z" }))).toBe("7s");
  });
});
