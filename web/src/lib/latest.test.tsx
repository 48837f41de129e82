import { act, render, renderHook, screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import { api } from "../api/endpoints";
import { deferFetch } from "../test/fixtures";
import { useAction, useLatest, useLoad, useUnmountSignal } from "./latest";

afterEach(() => vi.unstubAllGlobals());

/** Shows run `id`'s name as useLoad returns it, and its error. */
function RunName({ id }: { id: string }) {
  const run = useLoad((signal) => api.run(id, signal), id);
  return (
    <p data-testid="name">
      {run.loading ? "loading" : (run.data?.output_name ?? `error: ${String((run.error as Error | null)?.message)}`)}
    </p>
  );
}

describe("useLoad", () => {
  it("never returns the answer (or the error) for a key asked before, and aborts its request", async () => {
    const { held } = deferFetch();
    const { rerender } = render(<RunName id="a" />);
    rerender(<RunName id="b" />);
    const a = held("/api/runs/a");
    expect(a.aborted).toBe(true);
    held("/api/runs/b").answer({ output_name: "run-b" });
    expect(await screen.findByText("run-b")).toBeInTheDocument();
    // a's slow answer (here an error) lands after b's: b stays
    await act(async () => a.answer({ detail: "boom" }, 500));
    expect(screen.getByTestId("name")).toHaveTextContent("run-b");
    // back to a: nothing of b shows while a loads
    rerender(<RunName id="a" />);
    expect(screen.getByTestId("name")).toHaveTextContent("loading");
  });

  it("a reload supersedes the request in flight: the older answer is dropped", async () => {
    const { held } = deferFetch();
    let reload: () => Promise<void> = async () => undefined;
    function Runs() {
      const runs = useLoad((signal) => api.runs(signal), "runs");
      reload = runs.reload;
      return <p data-testid="runs">{runs.data?.runs.map((r) => r.status).join(",") ?? "loading"}</p>;
    }
    render(<Runs />);
    const first = held("/api/runs");
    act(() => void reload());
    const second = held("/api/runs");
    await act(async () => second.answer({ runs: [{ status: "completed" }] }));
    await act(async () => first.answer({ runs: [{ status: "running" }] }));
    expect(screen.getByTestId("runs")).toHaveTextContent("completed");
  });
});

describe("useAction", () => {
  it("runs once however often it is called while in flight, and says so with pending", async () => {
    let finish: () => void = () => undefined;
    const fn = vi.fn(() => new Promise<void>((resolve) => (finish = resolve)));
    function Button() {
      const action = useAction(fn);
      return (
        <button disabled={action.pending} onClick={() => void action.run()}>
          {action.pending ? "busy" : "go"}
        </button>
      );
    }
    render(<Button />);
    const button = screen.getByRole("button");
    // two clicks before React re-renders (a double click faster than a render): one call
    act(() => {
      button.click();
      button.click();
    });
    expect(fn).toHaveBeenCalledTimes(1);
    expect(button).toBeDisabled();
    await act(async () => finish());
    await waitFor(() => expect(button).toHaveTextContent("go"));
    await userEvent.click(button);
    expect(fn).toHaveBeenCalledTimes(2);
  });
});

describe("after the unmount", () => {
  it("a request begun by a late answer (a reload after an action) is sent for nobody: aborted, never current", () => {
    const { result, unmount } = renderHook(() => useLatest());
    const before = result.current.begin();
    expect(before.signal.aborted).toBe(false);
    unmount();
    expect(before.signal.aborted).toBe(true);
    const late = result.current.begin();
    expect(late.signal.aborted).toBe(true);
    expect(late.current()).toBe(false);
  });

  it("useUnmountSignal aborts on unmount, not before (StrictMode's second mount included)", () => {
    const { result, unmount } = renderHook(() => useUnmountSignal(), { reactStrictMode: true });
    const signal = result.current();
    expect(signal.aborted).toBe(false);
    unmount();
    expect(signal.aborted).toBe(true);
  });
});
