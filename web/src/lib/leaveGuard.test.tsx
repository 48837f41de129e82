import { act, render, renderHook, screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { describe, expect, it, vi } from "vitest";
import type { GenerateResult } from "../api/types";
import { StepGrid } from "../components/StepGrid";
import { mockFetch } from "../test/fixtures";
import { inFlight, newFlight, track } from "./generationInFlight";
import { useUploadView } from "./uploadsInFlight";

/** Whether the browser would ask before this tab is reloaded or closed. */
function asks(): boolean {
  const e = new Event("beforeunload", { cancelable: true });
  window.dispatchEvent(e);
  return e.defaultPrevented;
}

describe("leaving the tab while its work would be lost", () => {
  it("does not ask while a generation is in flight: the tab keeps its id, and a reload follows it again", async () => {
    let answer: (v: never) => void = () => {};
    const result = new Promise<never>((resolve) => (answer = resolve));
    track({ ...newFlight("gen-1", [], "/m"), result });
    expect(inFlight()?.requestId).toBe("gen-1");
    expect(asks()).toBe(false); // the server renders it to the end whatever the page does (POST /api/generations)
    expect(window.sessionStorage.getItem("lorastudio.generation")).toBe("gen-1");
    answer(null as never);
    await result;
    await Promise.resolve();
    expect(inFlight()).toBeNull();
    expect(window.sessionStorage.getItem("lorastudio.generation")).toBeNull();
  });

  it("asks while an upload is being sent, not once it is done", () => {
    const { result } = renderHook(() => useUploadView("cats"));
    expect(asks()).toBe(false);
    act(() => result.current.setUpload({ sentBytes: 0, totalBytes: 10, batch: 1, batches: 2, done: false, stored: [] }));
    expect(asks()).toBe(true);
    act(() => result.current.setUpload((u) => u && { ...u, done: true }));
    expect(asks()).toBe(false);
  });

  it("asks while a LoRA-by-step grid renders, not after it ended", async () => {
    const at = (step: number, final: boolean) => ({ step, final, path: `/o/cats/${step}.safetensors`, url: `/api/loras/cats/file?step=${step}`, best: false, last: final });
    mockFetch(({ url }) => (url === "/api/loras/cats/steps" ? { body: { name: "cats", loras: [at(2, false), at(4, true)] } } : undefined));
    const answers: ((r: GenerateResult) => void)[] = [];
    const generate = vi.fn(() => new Promise<GenerateResult>((resolve) => answers.push(resolve)));
    const image = { file: "g.png", url: "/gallery/g.png", path: "/g/g.png", seconds: 1, seed: 0, width: 32, height: 32, prompt: "p", loras: [] } as GenerateResult;
    render(<StepGrid pick={{ name: "cats", scale: 1 }} body={{ family: "flux", base_model: "/m", prompt: "p" }} generate={generate} busy={false} />);
    await userEvent.click(await screen.findByRole("button", { name: /Render grid \(2 images/ }));
    expect(asks()).toBe(true);
    act(() => answers[0](image));
    await waitFor(() => expect(answers).toHaveLength(2));
    expect(asks()).toBe(true); // between its images too
    act(() => answers[1](image));
    await waitFor(() => expect(asks()).toBe(false));
  });
});
