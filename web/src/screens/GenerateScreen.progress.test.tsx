/** Generate's progress (split from GenerateScreen.test.tsx): a generation followed by polling its
 * state, its Cancel (also one pressed before the server knew it, RELIABILITY 1052), a failure as the
 * server told it, and the generation this tab sent before a reload, followed or quietly forgotten. */
import { screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { beforeEach, describe, expect, it, vi } from "vitest";
import type { GalleryImage } from "../api/types";
import { type Call, galleryImage, generationStatus, INFO, mockFetch } from "../test/fixtures";
import { forgetGeneration } from "../lib/generationInFlight";
import { GenerateScreen } from "./GenerateScreen";
import { renderWithProviders } from "../test/render";

const OLD: GalleryImage = galleryImage([{ name: "cats", scale: 0.8 }]);
const NEW: GalleryImage = { ...OLD, file: "new.png", url: "/gallery/new.png", created: 2, prompt: "a new dog", seed: 3, loras: [] };
const json = (status: number, body: unknown) => new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });

describe("GenerateScreen: a generation's progress", () => {
  let calls: Call[];
  let images: GalleryImage[];
  beforeEach(() => {
    vi.unstubAllGlobals();
    images = [OLD];
    calls = mockFetch(({ url }) => {
      if (url === "/api/info") return { body: INFO };
      if (url.startsWith("/api/train/status")) return { body: { job: null, queue: [], busy: false, event_seq: 0 } };
      if (url === "/api/loras?family=flux") {
        return { body: { root: "/o", loras: [{ name: "cats", family: "flux", path: "/o/cats/cats.safetensors", bytes: 2048, modified: 1, sidecar: null }] } };
      }
      if (url === "/api/gallery") return { body: { images } };
      return undefined;
    });
  });

  const renderScreen = () => renderWithProviders(<GenerateScreen />);

  it("follows a generation by polling: its step of steps, Cancel by its request id, the shown image kept", async () => {
    const inner = globalThis.fetch;
    let state: Record<string, unknown> = {};
    vi.stubGlobal(
      "fetch",
      vi.fn(async (url: string, init?: RequestInit) => {
        if (url === "/api/generations" && init?.method === "POST") {
          const body = JSON.parse(init.body as string) as { request_id: string };
          calls.push({ method: "POST", url, body, headers: {} });
          state = generationStatus(body.request_id, "queued"); // answered at once: no request stays open while it renders
          return json(202, state);
        }
        if (url.startsWith("/api/generations/") && url.endsWith("/cancel")) {
          calls.push({ method: "POST", url, body: null, headers: {} });
          const error = { error: "GenerationCancelled", detail: "generation cancelled after denoising step 3", status: 409 };
          state = { ...state, state: "cancelled", error, ended: 2 };
          return json(200, { request_id: url.split("/")[3], was: "running" });
        }
        if (url.startsWith("/api/generations/")) {
          calls.push({ method: "GET", url, body: null, headers: {} });
          if (state.state === "queued") state = { ...state, state: "generating", step: 3, steps: 20 };
          return json(200, state);
        }
        return inner(url, init);
      }),
    );
    renderScreen();
    await screen.findByTestId("gallery");
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    expect(await screen.findByTestId("generate-progress")).toHaveTextContent("Waiting for the GPU…"); // the 202's state
    await waitFor(() => expect(screen.getByTestId("generate-progress")).toHaveTextContent("Step 3 of 20")); // then polled
    const sent = (calls.find((c) => c.url === "/api/generations")?.body as { request_id: string }).request_id;
    expect(sent).toMatch(/^[A-Za-z0-9_-]{1,64}$/);
    expect(calls.some((c) => c.method === "GET" && c.url === `/api/generations/${sent}`)).toBe(true);
    await userEvent.click(await screen.findByRole("button", { name: "Cancel" }));
    expect(calls.map((c) => c.url)).toContain(`/api/generations/${sent}/cancel`);
    expect(await screen.findByText("Generation cancelled: nothing was kept.")).toBeInTheDocument();
    expect(screen.getByRole("button", { name: "Generate" })).toBeEnabled();
    expect(screen.queryByRole("button", { name: "Cancel" })).toBeNull();
    expect(screen.queryByTestId("generate-progress")).toBeNull();
    expect(document.querySelector(".banner.error")).toBeNull(); // a cancel is no error
    expect(screen.getByTestId("result-image")).toHaveAttribute("src", "/gallery/old.png");
  });

  it("a Cancel pressed before the server knew the generation reaches it once its POST is answered (RELIABILITY 1052)", async () => {
    const inner = globalThis.fetch;
    let answerPost: (answer: Response) => void = () => {};
    let state: Record<string, unknown> | null = null; // null: the server does not know it yet
    const cancels: string[] = [];
    vi.stubGlobal(
      "fetch",
      vi.fn(async (url: string, init?: RequestInit) => {
        if (url === "/api/generations" && init?.method === "POST") {
          calls.push({ method: "POST", url, body: JSON.parse(init.body as string), headers: {} });
          return new Promise<Response>((resolve) => (answerPost = resolve)); // its check still runs
        }
        if (url.startsWith("/api/generations/") && url.endsWith("/cancel")) {
          cancels.push(url);
          if (!state) return json(404, { error: "NotFound", detail: "no generation in flight (unknown here)" });
          const error = { error: "GenerationCancelled", detail: "generation cancelled while it waited for the worker", status: 409 };
          state = { ...state, state: "cancelled", error, ended: 2 };
          return json(200, { request_id: url.split("/")[3], was: "waiting" });
        }
        if (url.startsWith("/api/generations/")) return json(200, state);
        return inner(url, init);
      }),
    );
    renderScreen();
    await screen.findByTestId("gallery");
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    await userEvent.click(await screen.findByRole("button", { name: "Cancel" }));
    await waitFor(() => expect(cancels).toHaveLength(1)); // 404: not in flight yet, said nowhere
    const id = (calls.find((c) => c.url === "/api/generations")?.body as { request_id: string }).request_id;
    state = generationStatus(id, "queued");
    answerPost(json(202, state));
    expect(await screen.findByText("Generation cancelled: nothing was kept.")).toBeInTheDocument();
    expect(cancels).toEqual([`/api/generations/${id}/cancel`, `/api/generations/${id}/cancel`]);
  });

  it("says a failed generation's error, as the server told it in the generation's state", async () => {
    const inner = globalThis.fetch;
    vi.stubGlobal(
      "fetch",
      vi.fn(async (url: string, init?: RequestInit) => {
        if (url === "/api/generations" && init?.method === "POST") {
          const id = (JSON.parse(init.body as string) as { request_id: string }).request_id;
          return json(202, generationStatus(id, "loading"));
        }
        if (url.startsWith("/api/generations/")) {
          const error = { error: "GenerationWorkerLost", detail: "the generation worker was killed (SIGKILL; out of memory?)", status: 503 };
          return json(200, generationStatus(url.split("/")[3], "failed", { error, ended: 2 }));
        }
        return inner(url, init);
      }),
    );
    renderScreen();
    await screen.findByTestId("gallery");
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    expect(await screen.findByText("the generation worker was killed (SIGKILL; out of memory?)")).toBeInTheDocument();
    expect(screen.getByRole("button", { name: "Generate" })).toBeEnabled();
    // read with the button when the user is back on it (RELIABILITY 2060)
    expect(screen.getByRole("button", { name: "Generate" })).toHaveAccessibleDescription(/the generation worker was killed/);
  });

  it("follows the generation this tab sent before a reload, and shows its image", async () => {
    forgetGeneration();
    window.sessionStorage.setItem("lorastudio.generation", "gen-before-reload");
    const inner = globalThis.fetch;
    let polls = 0;
    vi.stubGlobal(
      "fetch",
      vi.fn(async (url: string, init?: RequestInit) => {
        if (url === "/api/generations/gen-before-reload") {
          calls.push({ method: "GET", url, body: null, headers: {} });
          polls += 1;
          const image = { file: "new.png", url: "/gallery/new.png", path: "/g/new.png", seconds: 1.5, seed: 3, width: 64, height: 64, prompt: "a new dog", loras: [] };
          if (polls > 1) images = [NEW, OLD];
          const now = polls > 1 ? generationStatus("gen-before-reload", "done", { image, ended: 2 }) : generationStatus("gen-before-reload", "generating", { step: 7, steps: 8 });
          return json(200, now);
        }
        return inner(url, init);
      }),
    );
    renderScreen();
    await waitFor(() => expect(screen.getByTestId("generate-progress")).toHaveTextContent("Step 7 of 8"));
    await waitFor(() => expect(screen.getByTestId("result-image")).toHaveAttribute("src", "/gallery/new.png"));
    expect(calls.some((c) => c.url === "/api/generations")).toBe(false); // nothing sent again
    expect(window.sessionStorage.getItem("lorastudio.generation")).toBeNull();
  });

  it("a generation found after a reload that the server no longer knows is forgotten quietly", async () => {
    forgetGeneration();
    window.sessionStorage.setItem("lorastudio.generation", "gen-forgotten");
    renderScreen(); // the test's fetch answers 404 for GET /api/generations/gen-forgotten
    await screen.findByTestId("gallery");
    await waitFor(() => expect(window.sessionStorage.getItem("lorastudio.generation")).toBeNull());
    expect(screen.getByRole("button", { name: "Generate" })).toBeEnabled();
    expect(document.querySelector(".banner.error")).toBeNull();
  });
});
