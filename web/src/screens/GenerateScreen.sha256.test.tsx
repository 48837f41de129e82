/** "Reuse these settings" pins each LoRA file by the sha256 the gallery image recorded (RELIABILITY 280):
 * a file changed since is refused by the server (400 `loras.N.sha256`), said as such, and the user may
 * generate with the current file; and the server's stop / full disk answers leave the form usable. */
import { screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { GalleryImage } from "../api/types";
import { type Call, galleryImage, INFO, mockFetch } from "../test/fixtures";
import { GenerateScreen } from "./GenerateScreen";
import { renderWithProviders } from "../test/render";

const DIGEST = "ab".repeat(32);
const NOW = "cd".repeat(32);
const OLD: GalleryImage = galleryImage([{ name: "cats", scale: 0.8, sha256: DIGEST }]);
type LoraSent = { name: string; scale: number; sha256?: string | null };

const renderScreen = () =>
  renderWithProviders(<GenerateScreen />);

describe("GenerateScreen: a reused image's LoRA files", () => {
  let calls: Call[];
  let generate: (body: { loras: LoraSent[] }) => { status?: number; body: unknown };
  beforeEach(() => {
    generate = (body) =>
      body.loras.some((l) => l.sha256 && l.sha256 !== NOW)
        ? {
            status: 400,
            body: {
              error: "ConfigError",
              detail: "loras.0.sha256: LoRA 'cats' is no longer the file of that sha256",
              problems: [{ field: "loras.0.sha256", message: `LoRA 'cats' is no longer the file of that sha256 (now ${NOW}): its run was retrained or the file replaced; leave sha256 out to use the file as it is` }],
            },
          }
        : { status: 201, body: { file: "new.png", url: "/gallery/new.png", path: "/g/new.png", seconds: 1, seed: 7, width: 64, height: 64, prompt: "an old cat", loras: [] } };
    calls = mockFetch(({ method, url, body }) => {
      if (url === "/api/info") return { body: INFO };
      if (url.startsWith("/api/train/status")) return { body: { job: null, queue: [], busy: false, event_seq: 0 } };
      if (url === "/api/loras?family=flux") return { body: { root: "/o", loras: [{ name: "cats", family: "flux", path: "/o/cats/cats.safetensors", bytes: 2048, modified: 1, sidecar: null }] } };
      if (url === "/api/gallery") return { body: { images: [OLD] } };
      if (url === "/api/loras/cats/steps") return { body: { name: "cats", loras: [] } };
      if (method === "POST" && url === "/api/generations") return generate(body as { loras: LoraSent[] });
      return undefined;
    });
  });
  afterEach(() => vi.unstubAllGlobals());

  const generated = () => calls.filter((c) => c.method === "POST" && c.url === "/api/generations").map((c) => (c.body as { loras: LoraSent[] }).loras);

  it("sends each LoRA's sha256 back, says a changed file clearly, and generates with the current file only when asked", async () => {
    renderScreen();
    await screen.findByTestId("result-image");
    await userEvent.click(screen.getByRole("button", { name: "Reuse these settings" }));
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    const alert = await screen.findByTestId("lora-changed");
    expect(alert).toHaveAttribute("role", "alert");
    expect(alert).toHaveTextContent(/The LoRA file of cats changed since this image was made/);
    expect(generated()).toEqual([[{ name: "cats", scale: 0.8, step: null, sha256: DIGEST }]]);
    // nothing is sent again until the user decides
    expect(generated()).toHaveLength(1);
    await userEvent.click(within(alert).getByRole("button", { name: "Generate with the current file" }));
    await waitFor(() => expect(generated()).toHaveLength(2));
    expect(generated()[1]).toEqual([{ name: "cats", scale: 0.8, step: null }]);
    await waitFor(() => expect(screen.queryByTestId("lora-changed")).toBeNull());
    expect(screen.getByRole("button", { name: "Generate" })).toBeEnabled();
  });

  it("a LoRA picked by hand is the file as it is (no sha256), and the offer goes when the picks change", async () => {
    renderScreen();
    await screen.findByTestId("result-image");
    await userEvent.click(screen.getByRole("button", { name: "Reuse these settings" }));
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    await screen.findByTestId("lora-changed");
    await userEvent.click(screen.getByLabelText("use LoRA cats")); // unpicked
    expect(screen.queryByTestId("lora-changed")).toBeNull();
    await userEvent.click(screen.getByLabelText("use LoRA cats")); // picked again by hand
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    await waitFor(() => expect(generated()).toHaveLength(2));
    expect(generated()[1]).toEqual([{ name: "cats", scale: 1 }]);
  });

  it.each([
    [503, "ServerStopping", "the server is stopping: this generation was stopped and nothing of it kept; send it again once the server is back"],
    [507, "NoSpaceLeft", "no space left on device: the gallery image (/g); free some space and retry"],
  ])("a %i (%s) is shown as the server's words, the form keeps what was typed and can send again", async (status, error, detail) => {
    generate = () => ({ status, body: { error, detail } });
    renderScreen();
    await screen.findByTestId("result-image");
    const prompt = document.querySelector('[name="prompt"]') as HTMLTextAreaElement;
    await userEvent.clear(prompt);
    await userEvent.type(prompt, "a typed prompt");
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    const alert = await screen.findByRole("alert");
    expect(alert).toHaveTextContent(detail);
    expect(prompt).toHaveValue("a typed prompt");
    expect(screen.getByRole("button", { name: "Generate" })).toBeEnabled();
    expect(generated()).toHaveLength(1); // not retried behind the user's back
  });
});
