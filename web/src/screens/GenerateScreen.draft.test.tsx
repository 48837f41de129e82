import { fireEvent, screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { beforeEach, describe, expect, it, vi } from "vitest";
import type { GalleryImage } from "../api/types";
import { type Call, galleryImage, generationStatus, INFO, mockFetch } from "../test/fixtures";
import { GenerateScreen } from "./GenerateScreen";
import { renderWithProviders } from "../test/render";

const OLD: GalleryImage = galleryImage([]);
const NEW: GalleryImage = { ...OLD, file: "new.png", url: "/gallery/new.png", created: 2, prompt: "kept prompt", seed: 3, loras: [] };
const field = (name: string) => document.querySelector(`[name="${name}"]`) as HTMLInputElement;
const json = (status: number, body: unknown) => new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });

const renderScreen = () =>
  renderWithProviders(<GenerateScreen />);

describe("GenerateScreen: leaving the screen", () => {
  let calls: Call[];
  let images: GalleryImage[];
  beforeEach(() => {
    vi.unstubAllGlobals();
    images = [OLD];
    calls = mockFetch(({ method, url, body }) => {
      if (url === "/api/info") return { body: INFO };
      if (url.startsWith("/api/train/status")) return { body: { job: null, queue: [], busy: false, event_seq: 0 } };
      if (url === "/api/loras?family=flux") {
        return { body: { root: "/o", loras: [{ name: "cats", family: "flux", path: "/o/cats/cats.safetensors", bytes: 2048, modified: 1, sidecar: null }] } };
      }
      if (url === "/api/loras/cats/steps") return { body: { name: "cats", loras: [] } };
      if (url === "/api/gallery") return { body: { images } };
      if (method === "POST" && url === "/api/generations" && (body as { seed?: number }).seed === -5) {
        return { status: 422, body: { detail: [{ loc: ["body", "seed"], msg: "Input should be greater than or equal to 0", type: "greater_than_equal" }] } };
      }
      return undefined;
    });
  });

  it("keeps the prompt, numbers and LoRA picks typed (another screen, Back, a reload)", async () => {
    const first = renderScreen();
    await screen.findByTestId("gallery");
    await userEvent.clear(field("prompt"));
    await userEvent.type(field("prompt"), "a cat in a hat");
    await userEvent.clear(field("gen_seed"));
    await userEvent.type(field("gen_seed"), "1234");
    await userEvent.click(await screen.findByLabelText("use LoRA cats"));
    fireEvent.change(screen.getByLabelText("scale of cats"), { target: { value: "0.5" } });
    first.unmount();

    renderScreen();
    await screen.findByTestId("gallery");
    expect(field("prompt")).toHaveValue("a cat in a hat");
    expect(field("gen_seed")).toHaveValue("1234");
    expect(await screen.findByLabelText("use LoRA cats")).toBeChecked();
    expect(screen.getByLabelText("scale of cats")).toHaveValue("0.5");
  });

  it("a generation sent before the screen was left shows as running, then its image (one request)", async () => {
    const inner = globalThis.fetch;
    let release: (answer: Response) => void = () => {};
    vi.stubGlobal(
      "fetch",
      vi.fn(async (url: string, init?: RequestInit) => {
        if (url === "/api/generations" && init?.method === "POST") {
          calls.push({ method: "POST", url, body: JSON.parse(init.body as string), headers: {} });
          return new Promise<Response>((resolve) => (release = resolve)); // rendering
        }
        return inner(url, init);
      }),
    );
    const first = renderScreen();
    await screen.findByTestId("gallery");
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    await screen.findByRole("button", { name: "Cancel" });
    first.unmount(); // to Live and back, while the server renders

    renderScreen();
    await screen.findByTestId("gallery");
    expect(await screen.findByRole("button", { name: "Generating…" })).toBeDisabled();
    expect(screen.getByRole("button", { name: "Cancel" })).toBeInTheDocument();
    images = [NEW, OLD];
    const image = { file: "new.png", url: "/gallery/new.png", path: "/g/new.png", seconds: 1.5, seed: 3, width: 64, height: 64, prompt: "kept prompt", loras: [] };
    const id = (calls.find((c) => c.url === "/api/generations")?.body as { request_id: string }).request_id;
    release(json(202, generationStatus(id, "done", { image })));
    await waitFor(() => expect(screen.getByTestId("result-image")).toHaveAttribute("src", "/gallery/new.png"));
    expect(within(screen.getByTestId("gallery")).getByRole("button", { name: /kept prompt/ })).toHaveAttribute("aria-pressed", "true");
    expect(screen.getByRole("button", { name: "Generate" })).toBeEnabled();
    expect(calls.filter((c) => c.url === "/api/generations")).toHaveLength(1);
  });

  it("a value the server refuses is named next to its field, and fixing it clears the error", async () => {
    renderScreen();
    await screen.findByTestId("gallery");
    await userEvent.clear(field("gen_seed"));
    await userEvent.type(field("gen_seed"), "-5");
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    const seed = field("gen_seed").closest(".field") as HTMLElement;
    await waitFor(() => expect(seed).toHaveTextContent("Input should be greater than or equal to 0"));
    expect(field("gen_seed")).toHaveAttribute("aria-invalid", "true");
    // said once, next to the field (not again in a banner that outlives the fix)
    expect(document.querySelector(".banner.error")).toBeNull();
    await userEvent.clear(field("gen_seed"));
    await userEvent.type(field("gen_seed"), "5");
    expect(seed).not.toHaveTextContent("greater than or equal");
    expect(field("gen_seed")).not.toHaveAttribute("aria-invalid");
    expect(screen.queryByText(/greater than or equal/)).toBeNull();
  });

  it("a form never edited is not kept (its next visit has the defaults of then)", async () => {
    const first = renderScreen();
    await screen.findByTestId("gallery");
    first.unmount();
    expect(window.sessionStorage.getItem("lorastudio.draft.generate")).toBeNull();
  });

  it("a kept LoRA pick whose LoRA was deleted since is shown, and can be unticked", async () => {
    window.sessionStorage.setItem(
      "lorastudio.draft.generate",
      JSON.stringify({ family: "flux", prompt: "with a gone LoRA", picks: [{ name: "gone", scale: 0.5 }, { name: "cats", scale: 1 }] }),
    );
    renderScreen();
    const gone = await screen.findByLabelText("use LoRA gone");
    expect(gone).toBeChecked();
    expect(within(screen.getByTestId("missing-loras")).getByText(/not found: deleted or renamed/)).toBeInTheDocument();
    expect(screen.getByLabelText("use LoRA cats")).toBeChecked();
    await userEvent.click(gone);
    expect(screen.queryByTestId("missing-loras")).toBeNull();
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    await waitFor(() => expect(calls.some((c) => c.url === "/api/generations")).toBe(true));
    const sent = calls.find((c) => c.url === "/api/generations")?.body as { loras: { name: string }[] };
    expect(sent.loras.map((l) => l.name)).toEqual(["cats"]);
  });
});
