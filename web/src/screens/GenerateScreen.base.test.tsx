/** "Reuse these settings" sends the gallery image's base identity back (RELIABILITY 452): a base
 * replaced or fetched again since is refused by the server (400 `base_identity`), said as such, and
 * the user may generate with the base as it is now; another base model sends no identity. */
import { screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { GalleryImage } from "../api/types";
import { type Call, galleryImage, INFO, mockFetch } from "../test/fixtures";
import { GenerateScreen } from "./GenerateScreen";
import { renderWithProviders } from "../test/render";

const THEN = "ab".repeat(10);
const OLD: GalleryImage = { ...galleryImage([]), base_identity: THEN };
type Sent = { base_model: string; base_identity?: string | null };

const renderScreen = () =>
  renderWithProviders(<GenerateScreen />);

describe("GenerateScreen: a reused image's base model", () => {
  let calls: Call[];
  beforeEach(() => {
    const generate = (body: Sent) =>
      body.base_identity
        ? {
            status: 400,
            body: {
              error: "ConfigError",
              detail: "base_identity: the base model is no longer the one this image was made with",
              problems: [{ field: "base_identity", message: "the base model is no longer the one this image was made with (its files changed)" }],
            },
          }
        : { status: 201, body: { file: "new.png", url: "/gallery/new.png", path: "/g/new.png", seconds: 1, seed: 7, width: 64, height: 64, prompt: "an old cat", loras: [] } };
    calls = mockFetch(({ method, url, body }) => {
      if (url === "/api/info") return { body: INFO };
      if (url.startsWith("/api/train/status")) return { body: { job: null, queue: [], busy: false, event_seq: 0 } };
      if (url === "/api/loras?family=flux") return { body: { root: "/o", loras: [] } };
      if (url === "/api/gallery") return { body: { images: [OLD] } };
      if (method === "POST" && url === "/api/generations") return generate(body as Sent);
      return undefined;
    });
  });
  afterEach(() => vi.unstubAllGlobals());

  const generated = () => calls.filter((c) => c.method === "POST" && c.url === "/api/generations").map((c) => c.body as Sent);

  it("sends the base identity back, says a changed base clearly, and generates with the current base only when asked", async () => {
    renderScreen();
    await screen.findByTestId("result-image");
    await userEvent.click(screen.getByRole("button", { name: "Reuse these settings" }));
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    const alert = await screen.findByTestId("base-changed");
    expect(alert).toHaveAttribute("role", "alert");
    expect(alert).toHaveTextContent(/The base model \/home\/u\/.lorastudio\/models\/tiny-flux changed since this image was made/);
    expect(generated()).toHaveLength(1);
    expect(generated()[0].base_identity).toBe(THEN);
    await userEvent.click(within(alert).getByRole("button", { name: "Generate with the current base" }));
    await waitFor(() => expect(generated()).toHaveLength(2));
    expect(generated()[1].base_identity).toBeUndefined();
    await waitFor(() => expect(screen.queryByTestId("base-changed")).toBeNull());
    // the reused settings now take the base as it is: sent again, still without the identity
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    await waitFor(() => expect(generated()).toHaveLength(3));
    expect(generated()[2].base_identity).toBeUndefined();
  });
});
