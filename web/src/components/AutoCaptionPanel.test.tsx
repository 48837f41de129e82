import { act, render, screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { CaptionJob, CatalogueModel } from "../api/types";
import { CATALOGUE, deferFetch, mockFetch } from "../test/fixtures";
import { AutoCaptionPanel } from "./AutoCaptionPanel";
import { renderWithProviders } from "../test/render";

const RUNNING: CaptionJob = {
  id: "c1",
  dataset: "mix",
  model: "/models/tiny-vlm",
  device: "cpu",
  prefix: "sks",
  overwrite: true,
  status: "running",
  total: 3,
  done: 1,
  captioned: 1,
  skipped: 0,
  failed: 0,
  failures: [],
  preview: [{ file: "a.png", caption: "sks, a red square" }],
  error: null,
  cancel_reason: null,
  created_at: "2026-12-04T18:00:00+00:00",
  finished_at: null,
};

const DONE: CaptionJob = {
  ...RUNNING,
  status: "completed",
  done: 3,
  captioned: 2,
  failed: 1,
  cut: 1,
  kohya_kept: 1,
  failures: [{ file: "broken.png", reason: "corrupt or not a PNG/JPEG/WebP image" }],
  preview: [...RUNNING.preview, { file: "c.png", caption: "sks, a blue circle" }],
  finished_at: "2026-12-04T18:00:09+00:00",
};

afterEach(() => {
  vi.unstubAllGlobals();
  vi.restoreAllMocks();
});

/**
 * The panel's 1 s polls made by the test, not waited for (a real second each: ~2-3 s a test;
 * suitetime8): the poll timer is kept, and `poll()` runs the one due and waits for its answer.
 * Every other timer (Testing Library's own 1000 ms timeouts among them, userEvent's) stays real.
 * `poll(false)`: the poll is sent, its answer not awaited (a held fetch answers it later).
 */
function manualPolls(): (answered?: boolean) => Promise<void> {
  const due = new Map<number, () => Promise<void>>();
  let last = 1_000_000;
  const set = globalThis.setTimeout.bind(globalThis);
  const clear = globalThis.clearTimeout.bind(globalThis);
  vi.spyOn(globalThis, "setTimeout").mockImplementation(((fn: () => Promise<void>, ms?: number) => {
    // the panel's poll: an async callback of POLL_MS (Testing Library's 1000 ms timeouts are not async)
    if (ms !== 1000 || fn.constructor.name !== "AsyncFunction") return set(fn, ms);
    due.set(++last, fn);
    return last;
  }) as unknown as typeof setTimeout);
  vi.spyOn(globalThis, "clearTimeout").mockImplementation(((id?: number) => {
    if (!due.delete(id as number)) clear(id);
  }) as typeof clearTimeout);
  return async (answered = true) => {
    await waitFor(() => expect(due.size).toBe(1)); // one poll at a time, scheduled after the last answer
    const [[id, fn]] = [...due];
    due.delete(id);
    await act(async () => {
      const answer = fn();
      if (answered) await answer;
    });
  };
}

describe("AutoCaptionPanel", () => {
  it("starts a caption job with the model, prefix and overwrite, shows progress, the preview and failures", async () => {
    const poll = manualPolls();
    let polls = 0;
    const calls = mockFetch(({ url, method }) => {
      if (url === "/api/datasets/mix/caption" && method === "POST") return { status: 202, body: RUNNING };
      if (url === "/api/captions/c1") return { body: ++polls > 1 ? DONE : RUNNING };
      return undefined;
    });
    const onFinished = vi.fn();
    render(<AutoCaptionPanel dataset="mix" onFinished={onFinished} />);
    await userEvent.click(screen.getByTestId("caption-ai"));
    const model = screen.getByTestId("caption-model");
    await userEvent.clear(model);
    await userEvent.type(model, "/models/tiny-vlm");
    await userEvent.type(screen.getByTestId("caption-prefix"), "sks");
    await userEvent.click(screen.getByTestId("caption-overwrite"));
    await userEvent.click(screen.getByTestId("caption-start"));
    const start = calls.find((c) => c.method === "POST");
    expect(start?.body).toEqual({ model: "/models/tiny-vlm", prefix: "sks", overwrite: true, prompt: null, max_tokens: 60 });
    expect(await screen.findByText("Captioning 1 / 3 on cpu")).toBeTruthy();
    expect(screen.getByRole("progressbar").getAttribute("aria-valuenow")).toBe("1");
    expect(screen.getByTestId("caption-preview").textContent).toContain("sks, a red square");
    expect(screen.queryByTestId("caption-cut")).toBeNull();
    expect(screen.queryByTestId("caption-kohya")).toBeNull();
    await poll(); // still running
    expect(onFinished).not.toHaveBeenCalled();
    await poll(); // done
    expect(onFinished).toHaveBeenCalledTimes(1);
    // a caption that stopped at max tokens is said, not shown as a whole one (RELIABILITY 1941)
    expect(screen.getByTestId("caption-cut")).toHaveTextContent("1 caption(s) stopped at the max tokens");
    // an image kept for its kohya .caption, which a run does not read, is said (RELIABILITY 1944)
    expect(screen.getByTestId("caption-kohya")).toHaveTextContent("1 image(s) kept a kohya .caption file");
    expect(screen.getByTestId("caption-status").textContent).toContain(
      "Caption job completed: 2 captioned, 0 kept their caption, 1 failed",
    );
    expect(screen.getByTestId("caption-preview").textContent).toContain("sks, a blue circle");
    expect(screen.getByTestId("caption-failures").textContent).toContain("broken.png");
    expect(screen.queryByTestId("caption-cancel")).toBeNull();
  });

  it("tells a screen reader the job's stage and how it ended, not each image (RELIABILITY 1913)", async () => {
    const poll = manualPolls();
    let polls = 0;
    mockFetch(({ url, method }) => {
      if (url === "/api/datasets/mix/caption" && method === "POST") return { status: 202, body: { ...RUNNING, total: null, done: 0 } };
      if (url === "/api/captions/c1") return { body: [RUNNING, { ...RUNNING, done: 2 }][polls++] ?? DONE };
      return undefined;
    });
    render(<AutoCaptionPanel dataset="mix" onFinished={() => undefined} />);
    await userEvent.click(screen.getByTestId("caption-ai"));
    const said = screen.getByRole("status"); // there before the job, so its changes are read
    expect(said).toHaveTextContent(/^$/);
    await userEvent.click(screen.getByTestId("caption-start"));
    await waitFor(() => expect(said).toHaveTextContent("Loading /models/tiny-vlm…")); // the start's answer (total not known yet)
    await poll();
    await waitFor(() => expect(said).toHaveTextContent("Captioning 3 images on cpu…"));
    await poll();
    await screen.findByText("Captioning 2 / 3 on cpu");
    expect(said).toHaveTextContent("Captioning 3 images on cpu…"); // the same: no news
    await poll();
    await waitFor(() => expect(said).toHaveTextContent("Caption job completed: 2 captioned, 0 kept their caption, 1 failed."));
  });

  it("sends the prompt and max tokens typed; the server's refusal of one is shown (RELIABILITY 1943)", async () => {
    const calls = mockFetch(({ url, method, body }) => {
      if (url === "/api/datasets/mix/caption" && method === "POST") {
        const asked = body as { max_tokens: number };
        if (asked.max_tokens > 512)
          return { status: 422, body: { error: "ValidationError", detail: "max_tokens: Input should be less than or equal to 512" } };
        return { status: 202, body: { ...RUNNING, prompt: "List the objects, comma separated", max_tokens: 120 } };
      }
      if (url === "/api/captions/c1") return { body: RUNNING };
      return undefined;
    });
    render(<AutoCaptionPanel dataset="mix" onFinished={() => {}} />);
    await userEvent.click(screen.getByTestId("caption-ai"));
    expect(screen.getByTestId("caption-prompt")).toHaveAttribute("placeholder", expect.stringContaining("Describe this image"));
    await userEvent.type(screen.getByTestId("caption-prompt"), "List the objects, comma separated");
    const tokens = screen.getByTestId("caption-max-tokens");
    await userEvent.clear(tokens);
    expect(screen.getByTestId("caption-start")).toBeDisabled(); // no number: nothing to send
    await userEvent.type(tokens, "600");
    await userEvent.click(screen.getByTestId("caption-start"));
    expect(await screen.findByTestId("caption-error")).toHaveTextContent("less than or equal to 512");
    await userEvent.clear(tokens);
    await userEvent.type(tokens, "120");
    await userEvent.click(screen.getByTestId("caption-start"));
    const posts = calls.filter((c) => c.method === "POST");
    expect(posts.at(-1)?.body).toMatchObject({ prompt: "List the objects, comma separated", max_tokens: 120 });
    expect(await screen.findByText("Captioning 1 / 3 on cpu")).toBeTruthy();
  });

  it("cancels a running job and shows a refusal from the server", async () => {
    const calls = mockFetch(({ url, method }) => {
      if (url === "/api/datasets/mix/caption" && method === "POST") return { status: 202, body: RUNNING };
      if (url === "/api/captions/c1/cancel")
        return { body: { ...RUNNING, status: "cancelled", cancel_reason: "cancelled by the user" } };
      if (url === "/api/captions/c1") return { body: RUNNING };
      return undefined;
    });
    render(<AutoCaptionPanel dataset="mix" onFinished={() => {}} />);
    await userEvent.click(screen.getByTestId("caption-ai"));
    await userEvent.click(screen.getByTestId("caption-start"));
    await userEvent.click(await screen.findByTestId("caption-cancel"));
    expect(calls.some((c) => c.url === "/api/captions/c1/cancel" && c.method === "POST")).toBe(true);
    expect((await screen.findByTestId("caption-status")).textContent).toContain("(cancelled by the user)");
  });

  it("a poll answered after the Cancel does not bring the cancelled job back to running (RELIABILITY 156, 157)", async () => {
    const sendPoll = manualPolls();
    const { calls, held } = deferFetch(({ url, method }) => {
      if (url === "/api/datasets/mix/caption" && method === "POST") return { status: 202, body: RUNNING };
      if (url === "/api/captions/c1/cancel") return { body: { ...RUNNING, status: "cancelled", cancel_reason: "cancelled by the user" } };
      if (url === "/api/captions/c1") return undefined; // the poll: held
      return { status: 404, body: { detail: "none" } };
    });
    const onFinished = vi.fn();
    render(<AutoCaptionPanel dataset="mix" onFinished={onFinished} />);
    await userEvent.click(screen.getByTestId("caption-ai"));
    // a double click starts one job
    await userEvent.dblClick(screen.getByTestId("caption-start"));
    await sendPoll(false);
    await waitFor(() => expect(calls.some((c) => c.url === "/api/captions/c1")).toBe(true));
    expect(calls.filter((c) => c.url === "/api/datasets/mix/caption" && c.method === "POST")).toHaveLength(1);
    const poll = held("/api/captions/c1");
    await userEvent.click(screen.getByTestId("caption-cancel"));
    expect(await screen.findByText(/\(cancelled by the user\)/)).toBeInTheDocument();
    await act(async () => poll.answer(RUNNING)); // sent before the Cancel, answered after it
    expect(screen.getByTestId("caption-status")).toHaveTextContent("Caption job cancelled");
    expect(screen.queryByTestId("caption-cancel")).toBeNull();
    expect(onFinished).toHaveBeenCalledTimes(1);
  });

  it("a job the restarted server no longer knows ends in the panel; a failed poll is retried (session 26 caption audit)", async () => {
    const poll = manualPolls();
    let polls = 0;
    mockFetch(({ url, method }) => {
      if (url === "/api/datasets/mix/caption" && method === "POST") return { status: 202, body: RUNNING };
      if (url === "/api/captions/c1") {
        polls += 1;
        if (polls === 1) return { status: 502, body: { detail: "Bad Gateway" } }; // a blip
        if (polls === 2) return { body: { ...RUNNING, done: 2, eta_s: 65 } };
        return { status: 404, body: { error: "NotFound", detail: "no caption job with id 'c1' in this server's life" } };
      }
      return undefined;
    });
    const onFinished = vi.fn();
    render(<AutoCaptionPanel dataset="mix" onFinished={onFinished} />);
    await userEvent.click(screen.getByTestId("caption-ai"));
    await userEvent.click(screen.getByTestId("caption-start"));
    await poll(); // the blip
    expect(await screen.findByTestId("caption-poll-error")).toHaveTextContent("trying again");
    await poll(); // retried
    await waitFor(() => expect(screen.getByTestId("caption-status")).toHaveTextContent("Captioning 2 / 3"));
    expect(screen.getByTestId("caption-status")).toHaveTextContent("Captioning 2 / 3 on cpu, about 1m 05s left"); // RELIABILITY 1942
    expect(screen.queryByTestId("caption-poll-error")).toBeNull();
    await poll(); // 404: the server has no record
    await waitFor(() => expect(screen.getByTestId("caption-status")).toHaveTextContent("Caption job failed"));
    expect(screen.getByTestId("caption-status")).toHaveTextContent("the server restarted");
    expect(screen.queryByTestId("caption-cancel")).toBeNull();
    expect(screen.getByTestId("caption-start")).toBeEnabled(); // a new job can be started
    expect(onFinished).toHaveBeenCalledTimes(1);
  });

  it("opened after a restart, shows the dataset's last job interrupted from its record; a running one is followed (RELIABILITY 410)", async () => {
    const interrupted: CaptionJob = {
      ...RUNNING,
      status: "interrupted",
      done: 2,
      captioned: 2,
      error: "the lorastudio server (pid 7) ended without recording the end of this caption job (killed?); when last recorded 2 of 3 images were done",
      finished_at: "2026-12-04T18:00:05+00:00",
    };
    mockFetch(({ url, method }) => (url === "/api/datasets/mix/caption" && method === "GET" ? { body: interrupted } : undefined));
    const onFinished = vi.fn();
    const { unmount } = render(<AutoCaptionPanel dataset="mix" onFinished={onFinished} />);
    await userEvent.click(screen.getByTestId("caption-ai"));
    const status = await screen.findByTestId("caption-status");
    expect(status).toHaveTextContent("Caption job interrupted: 2 captioned, 0 kept their caption, 0 failed");
    expect(status).toHaveTextContent("when last recorded 2 of 3 images were done");
    expect(screen.queryByTestId("caption-cancel")).toBeNull();
    expect(screen.getByTestId("caption-start")).toBeEnabled();
    unmount();

    const poll = manualPolls();
    let polls = 0;
    mockFetch(({ url, method }) => {
      if (url === "/api/datasets/mix/caption" && method === "GET") return { body: RUNNING };
      if (url === "/api/captions/c1") return { body: ++polls > 1 ? DONE : RUNNING };
      return undefined;
    });
    render(<AutoCaptionPanel dataset="mix" onFinished={onFinished} />);
    await userEvent.click(screen.getByTestId("caption-ai"));
    expect(await screen.findByText("Captioning 1 / 3 on cpu")).toBeTruthy();
    await poll();
    await poll();
    await waitFor(() => expect(screen.getByTestId("caption-status")).toHaveTextContent("Caption job completed"));
    expect(onFinished).toHaveBeenCalledTimes(1);
  });

  it("counts every failure and lists the first ones the server sends (session 26 caption audit)", async () => {
    const failures = Array.from({ length: 100 }, (_, i) => ({ file: `b${i}.png`, reason: "corrupt" }));
    const many = { ...DONE, failed: 5000, captioned: 0, failures };
    mockFetch(({ url, method }) =>
      url === "/api/datasets/mix/caption" && method === "POST" ? { status: 202, body: many } : undefined,
    );
    render(<AutoCaptionPanel dataset="mix" onFinished={vi.fn()} />);
    await userEvent.click(screen.getByTestId("caption-ai"));
    await userEvent.click(screen.getByTestId("caption-start"));
    expect(await screen.findByTestId("caption-status")).toHaveTextContent("0 captioned, 0 kept their caption, 5000 failed");
    expect(screen.getByTestId("caption-failures")).toHaveTextContent("and 4900 more");
  });

  it("offers the catalogue's captioners: the fetched one preselected, those not fetched disabled; shows the GPU", async () => {
    const captioner = (over: Partial<CatalogueModel>): CatalogueModel => ({
      ...CATALOGUE[0], family: null, trainable: false, reason: "a captioning model", kind: "captioner", deletable: false, ...over,
    });
    const models = [
      CATALOGUE[0],
      captioner({ id: "florence-community--Florence-2-base", name: "florence-community/Florence-2-base", source: "catalogue", path: "", complete: false,
        checkpoint: "Florence-2 base: fast", licence: "MIT", repo_id: "florence-community/Florence-2-base" }),
      captioner({ id: "Qwen--Qwen2.5-VL-3B-Instruct", name: "Qwen/Qwen2.5-VL-3B-Instruct", source: "local", complete: true, deletable: true,
        checkpoint: "Qwen2.5-VL 3B Instruct: the default", licence: "Qwen Research License (non-commercial)", repo_id: "Qwen/Qwen2.5-VL-3B-Instruct" }),
    ];
    const onGpu = { ...RUNNING, device: "cuda" as const, gpu: 0, beside_training: "t1" };
    const calls = mockFetch(({ url, method }) => {
      if (url === "/api/models") return { body: models };
      if (url === "/api/datasets/mix/caption" && method === "POST") return { status: 202, body: onGpu };
      if (url === "/api/captions/c1") return { body: onGpu };
      return undefined;
    });
    render(<AutoCaptionPanel dataset="mix" onFinished={() => {}} />);
    await userEvent.click(screen.getByTestId("caption-ai"));
    const select = (await screen.findByTestId("caption-catalogue")) as HTMLSelectElement;
    await waitFor(() => expect((screen.getByTestId("caption-model") as HTMLInputElement).value).toBe("Qwen--Qwen2.5-VL-3B-Instruct"));
    expect(select.value).toBe("Qwen--Qwen2.5-VL-3B-Instruct");
    const options = Array.from(select.options).map((o) => [o.textContent, o.disabled]);
    expect(options).toEqual([
      ["other (type a hub id or folder below)", false],
      ["Florence-2 base (not fetched: fetch it on the Models page) · MIT", true],
      ["Qwen2.5-VL 3B Instruct · Qwen Research License (non-commercial)", false],
    ]); // the base model is not offered
    await userEvent.click(screen.getByTestId("caption-start"));
    expect(calls.find((c) => c.method === "POST")?.body).toMatchObject({ model: "Qwen--Qwen2.5-VL-3B-Instruct" });
    expect(await screen.findByText("Captioning 1 / 3 on GPU 0 (beside training job t1)")).toBeTruthy();
  });

  it("names the server's refusal", async () => {
    mockFetch(({ url }) =>
      url === "/api/datasets/mix/caption"
        ? { status: 409, body: { error: "JobActive", detail: "training job t1 is using the GPU" } }
        : undefined,
    );
    render(<AutoCaptionPanel dataset="mix" onFinished={() => {}} />);
    await userEvent.click(screen.getByTestId("caption-ai"));
    await userEvent.click(screen.getByTestId("caption-start"));
    expect((await screen.findByTestId("caption-error")).textContent).toContain("training job t1 is using the GPU");
  });
});

describe("DatasetDetailScreen", () => {
  it("offers Caption with AI on a dataset with images", async () => {
    const { DatasetDetailScreen } = await import("../screens/DatasetDetailScreen");
    const { INFO } = await import("../test/fixtures");
    mockFetch(({ url }) => {
      if (url === "/api/info") return { body: INFO };
      if (url === "/api/datasets/mix?limit=200")
        return {
          body: {
            name: "mix",
            path: "/d/mix",
            images: 1,
            captions: 0,
            masked: 0,
            with_alpha: 0,
            total_files: 1,
            offset: 0,
            limit: 200,
            files: [{ file: "a.png", caption: null, bytes: 100, width: 24, height: 16 }],
            dropped: [],
          },
        };
      return undefined;
    });
    renderWithProviders(<DatasetDetailScreen name="mix" />, { training: false });
    await userEvent.click(await screen.findByTestId("caption-ai"));
    expect(screen.getByTestId("caption-panel")).toBeTruthy();
  });
});
