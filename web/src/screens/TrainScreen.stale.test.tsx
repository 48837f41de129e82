/** Check (the preflight) while the form is edited (RELIABILITY 156): a report answered for settings
 * no longer in the form is not shown, and an edit drops the Check in flight; Start submitted
 * twice starts one run (RELIABILITY 157). */
import { act, fireEvent, screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import { INFO } from "../test/fixtures";
import { input, mockTrainServer, renderTrain } from "../test/trainServer";

afterEach(() => vi.unstubAllGlobals());

describe("TrainScreen: a slow Check", () => {
  it("its report, answered after an edit, is not shown as the report of the edited form", async () => {
    mockTrainServer(() => INFO);
    const server = globalThis.fetch as (url: string, init?: RequestInit) => Promise<Response>;
    // the preflight answers only when the test says so (and honours an abort, as fetch does)
    let answer: () => void = () => undefined;
    let aborted = false;
    vi.stubGlobal("fetch", (url: string, init?: RequestInit) => {
      if (url !== "/api/train/preflight") return server(url, init);
      return new Promise<Response>((resolve, reject) => {
        answer = () => void server(url, init).then(resolve);
        init?.signal?.addEventListener("abort", () => {
          aborted = true;
          reject(new DOMException("aborted", "AbortError"));
        });
      });
    });
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    expect(screen.getByRole("button", { name: "Checking…" })).toBeDisabled();
    await userEvent.clear(input("lora_rank"));
    await userEvent.type(input("lora_rank"), "64"); // edited while the Check is in flight
    expect(aborted).toBe(true);
    await act(async () => answer());
    await new Promise((r) => setTimeout(r, 50));
    expect(screen.queryByTestId("preflight")).toBeNull();
    expect(screen.getByRole("button", { name: "Check" })).toBeEnabled();
    // a Check of the form as it is now shows its report
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await act(async () => answer());
    expect(await screen.findByTestId("preflight")).toBeInTheDocument();
  });

  it("Start submitted twice before the first answer (Enter, then a click) starts one run", async () => {
    const calls = mockTrainServer(() => INFO);
    const server = globalThis.fetch as (url: string, init?: RequestInit) => Promise<Response>;
    vi.stubGlobal("fetch", (url: string, init?: RequestInit) => {
      if (url === "/api/train/start") {
        calls.push({ method: "POST", url, body: null, headers: {} });
        return new Promise<Response>(() => undefined); // never answered in this test
      }
      return server(url, init);
    });
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    const form = input("lora_rank").closest("form") as HTMLFormElement;
    act(() => {
      fireEvent.submit(form);
      fireEvent.submit(form);
    });
    await waitFor(() => expect(screen.getByRole("button", { name: "Starting…" })).toBeDisabled());
    expect(calls.filter((c) => c.url === "/api/train/start")).toHaveLength(1);
  });
});
