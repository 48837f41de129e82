import { screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { beforeEach, describe, expect, it, vi } from "vitest";
import type { GalleryImage } from "../api/types";
import { type Call, galleryImage, generationStatus, INFO, mockFetch } from "../test/fixtures";
import { GenerateScreen } from "./GenerateScreen";
import { renderWithProviders } from "../test/render";

const OLD: GalleryImage = galleryImage([]);
const json = (status: number, body: unknown) => new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });
const made = (file: string) => ({ file, url: `/gallery/${file}`, path: `/g/${file}`, seconds: 1, seed: 0, width: 64, height: 64, prompt: "p", loras: [] });
const at = (step: number, final: boolean) => ({
  step,
  final,
  path: final ? "/o/cats/cats.safetensors" : `/o/cats/loras/cats-step-00000${step}.safetensors`,
  url: final ? "/api/loras/cats/file" : `/api/loras/cats/file?step=${step}`,
  best: false,
  last: final,
});

const renderScreen = () => renderWithProviders(<GenerateScreen />);

describe("GenerateScreen: a LoRA-by-step grid across leaving the screen", () => {
  let calls: Call[];
  let images: GalleryImage[];
  // each POST /api/generate waits here until the test answers it
  let answers: ((r: Response) => void)[];
  beforeEach(() => {
    vi.unstubAllGlobals();
    images = [OLD];
    answers = [];
    calls = mockFetch(({ url }) => {
      if (url === "/api/info") return { body: INFO };
      if (url.startsWith("/api/train/status")) return { body: { job: null, queue: [], busy: false, event_seq: 0 } };
      if (url === "/api/loras?family=flux") {
        return { body: { root: "/o", loras: [{ name: "cats", family: "flux", path: "/o/cats/cats.safetensors", bytes: 2048, modified: 1, sidecar: null }] } };
      }
      if (url === "/api/loras/cats/steps") return { body: { name: "cats", loras: [at(2, false), at(4, false), at(6, true)] } };
      if (url === "/api/gallery") return { body: { images } };
      if (/^\/api\/generations\/[^/]+\/cancel$/.test(url)) return { body: { request_id: url.split("/")[3], cancelled: true } };
      return undefined;
    });
    const inner = globalThis.fetch;
    vi.stubGlobal(
      "fetch",
      vi.fn(async (url: string, init?: RequestInit) => {
        if (url === "/api/generations" && init?.method === "POST") {
          calls.push({ method: "POST", url, body: JSON.parse(init.body as string), headers: {} });
          return new Promise<Response>((resolve) => answers.push(resolve)); // rendering
        }
        return inner(url, init);
      }),
    );
  });
  const sent = () => calls.filter((c) => c.url === "/api/generations").map((c) => c.body as { loras: unknown; request_id: string });

  it("keeps rendering, shows its progress and images on the way back, and Cancel stops it there", async () => {
    const first = renderScreen();
    await screen.findByTestId("gallery");
    await userEvent.click(await screen.findByLabelText("use LoRA cats"));
    const grid = await screen.findByTestId("step-grid");
    await userEvent.click(within(grid).getByRole("button", { name: /Render grid \(3 images/ }));
    await waitFor(() => expect(answers).toHaveLength(1));
    first.unmount(); // to Live and back, while the server renders the first step
    answers[0](json(202, generationStatus(sent()[0].request_id, "done", { image: made("s2.png") }))); // ended while away: the grid sends the next step

    renderScreen();
    const back = await screen.findByTestId("step-grid");
    await waitFor(() => expect(answers).toHaveLength(2));
    // running: its progress, the image made while away, Cancel; Generate sends nothing meanwhile
    expect(within(back).getByRole("button", { name: "Rendering… (1 of 3)" })).toBeDisabled();
    expect(within(back).getByRole("img")).toHaveAttribute("alt", "cats step 2: p"); // its step and its prompt
    const said = within(back).getByTestId("grid-announcement"); // RELIABILITY 1913: the grid's stage, for a screen reader
    expect(said).toHaveTextContent(/^Rendering a grid of 3 images of cats…$/);
    expect(screen.getByRole("button", { name: "Generating…" })).toBeDisabled();
    await userEvent.click(within(back).getByRole("button", { name: "Cancel grid" }));
    await waitFor(() => expect(calls.some((c) => c.url === `/api/generations/${sent()[1].request_id}/cancel`)).toBe(true));
    images = [{ ...OLD, file: "s2.png", url: "/gallery/s2.png" }, OLD];
    const galleryLoads = calls.filter((c) => c.url === "/api/gallery").length;
    const error = { error: "GenerationCancelled", detail: "cancelled", status: 409 };
    answers[1](json(202, generationStatus(sent()[1].request_id, "cancelled", { error }))); // stopped between denoising steps
    await waitFor(() => expect(within(back).getByText(/Grid cancelled: 1 of 3 images made/)).toBeInTheDocument());
    expect(said).toHaveTextContent(/^Grid cancelled: 1 of 3 images of cats made\.$/);
    expect(sent().map((b) => b.loras)).toEqual([[{ name: "cats", scale: 1, step: 2 }], [{ name: "cats", scale: 1, step: 4 }]]); // step 6 never sent
    expect(within(back).queryByRole("alert")).toBeNull(); // a cancel is no error
    expect(screen.getByRole("button", { name: "Generate" })).toBeEnabled();
    // the gallery reloaded with the grid's image
    await waitFor(() => expect(calls.filter((c) => c.url === "/api/gallery").length).toBe(galleryLoads + 1));
  });
});
