import { act, renderHook } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import { inFlight, track } from "./generationInFlight";
import { useUploadView } from "./uploadsInFlight";

/** Whether the browser would ask before this tab is reloaded or closed. */
function asks(): boolean {
  const e = new Event("beforeunload", { cancelable: true });
  window.dispatchEvent(e);
  return e.defaultPrevented;
}

describe("leaving the tab while its work would be lost", () => {
  it("asks while a generation is in flight, not after it ended", async () => {
    expect(asks()).toBe(false);
    let answer: (v: never) => void = () => {};
    const result = new Promise<never>((resolve) => (answer = resolve));
    track({ requestId: "gen-1", sending: [], baseModel: "/m", cancelled: false, result });
    expect(inFlight()?.requestId).toBe("gen-1");
    expect(asks()).toBe(true);
    answer(null as never);
    await result;
    await Promise.resolve();
    expect(inFlight()).toBeNull();
    expect(asks()).toBe(false);
  });

  it("asks while an upload is being sent, not once it is done", () => {
    const { result } = renderHook(() => useUploadView("cats"));
    expect(asks()).toBe(false);
    act(() => result.current.setUpload({ sentBytes: 0, totalBytes: 10, batch: 1, batches: 2, done: false, stored: [] }));
    expect(asks()).toBe(true);
    act(() => result.current.setUpload((u) => u && { ...u, done: true }));
    expect(asks()).toBe(false);
  });
});
