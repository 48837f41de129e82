import { render, screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { beforeEach, describe, expect, it, vi } from "vitest";
import type { GalleryImage, Info } from "../api/types";
import { GenerateScreen } from "../screens/GenerateScreen";
import { ReferenceImages } from "./ReferenceImages";
import { type Call, INFO, mockFetch } from "../test/fixtures";
import { renderWithProviders } from "../test/render";

/** INFO with FLUX.2 klein (0..4 references) as the only family and model. */
const KLEIN: Info = {
  ...INFO,
  families: [{ ...INFO.families[1], name: "flux2-klein", title: "FLUX.2 klein", control_images: [0, 4] }],
  models: [{ name: "tiny-klein", path: "/m/tiny-klein", family: "flux2-klein" }],
};
const EDITED: GalleryImage = {
  file: "edit.png",
  url: "/gallery/edit.png",
  created: 1,
  prompt: "make it blue",
  seed: 1,
  family: "flux2-klein",
  base_model: "/m/tiny-klein",
  loras: [],
  references: ["r1.png"],
  reference_urls: ["/gallery/references/r1.png"],
};

describe("ReferenceImages on the Generate screen", () => {
  let calls: Call[];
  let uploaded = 0;
  let shown: GalleryImage[] = [EDITED];
  beforeEach(() => {
    vi.unstubAllGlobals();
    uploaded = 0;
    shown = [EDITED];
    calls = mockFetch(({ method, url }) => {
      if (url === "/api/info") return { body: KLEIN };
      if (url === "/api/models") return { body: [] };
      if (url.startsWith("/api/train/status")) return { body: { job: null, queue: [], busy: false, event_seq: 0 } };
      if (url.startsWith("/api/loras")) return { body: { root: "/o", loras: [] } };
      if (url === "/api/gallery") return { body: { images: shown } };
      if (method === "POST" && url === "/api/generate/references") {
        uploaded += 1;
        const id = `u${uploaded}.png`;
        return { status: 201, body: { references: [{ id, url: `/gallery/references/${id}` }] } };
      }
      if (method === "POST" && url === "/api/generations") {
        return { status: 201, body: { ...EDITED, path: "/g/edit.png", seconds: 1, width: 64, height: 64 } };
      }
      return undefined;
    });
  });

  const renderScreen = () =>
    renderWithProviders(<GenerateScreen />);

  it("uploads picked references, sends their ids in slot order, and lets one be removed", async () => {
    renderScreen();
    const field = await screen.findByTestId("reference-images");
    const user = userEvent.setup();
    await user.upload(within(field).getByTestId("reference-input"), new File([new Uint8Array(4)], "a.png"));
    await user.upload(within(field).getByTestId("reference-input"), new File([new Uint8Array(4)], "b.png"));
    await waitFor(() => expect(within(field).getAllByRole("img")).toHaveLength(2));
    const posted = calls.filter((c) => c.url === "/api/generate/references");
    expect(posted.map((c) => (c.body as FormData).getAll("files").map((f) => (f as File).name))).toEqual([["a.png"], ["b.png"]]);
    await user.click(screen.getByRole("button", { name: "Generate" }));
    await waitFor(() => expect(calls.some((c) => c.url === "/api/generations")).toBe(true));
    expect(calls.find((c) => c.url === "/api/generations")?.body).toMatchObject({ references: ["u1.png", "u2.png"] });
    await user.click(within(field).getByRole("button", { name: "remove reference 1" }));
    expect(within(field).getAllByRole("img").map((i) => i.getAttribute("alt"))).toEqual(["reference 1"]);
    expect(within(field).getByRole("img")).toHaveAttribute("src", "/gallery/references/u2.png");
  });

  it("sends a reused image's control_resolution with its references, and not with others (RELIABILITY 1652)", async () => {
    shown = [{ ...EDITED, control_resolution: 768 }]; // made with `lorastudio generate --control-resolution 768`
    renderScreen();
    await screen.findByTestId("gallery");
    const user = userEvent.setup();
    await user.click(screen.getByRole("button", { name: "Reuse these settings" }));
    await user.click(screen.getByRole("button", { name: "Generate" }));
    const sent = () => calls.filter((c) => c.url === "/api/generations").map((c) => c.body as Record<string, unknown>);
    await waitFor(() => expect(sent()).toHaveLength(1));
    expect(sent()[0]).toMatchObject({ references: ["r1.png"], control_resolution: 768 });
    const field = screen.getByTestId("reference-images");
    await user.click(within(field).getByRole("button", { name: "remove reference 1" }));
    await user.upload(within(field).getByTestId("reference-input"), new File([new Uint8Array(4)], "a.png"));
    await waitFor(() => expect(within(field).getAllByRole("img")).toHaveLength(1));
    await user.click(screen.getByRole("button", { name: "Generate" }));
    await waitFor(() => expect(sent()).toHaveLength(2));
    expect(sent()[1]).toMatchObject({ references: ["u1.png"] });
    expect(sent()[1]).not.toHaveProperty("control_resolution"); // another reference: fitted to the output size
  });

  it("shows the gallery's references and reuses them", async () => {
    renderScreen();
    const gallery = await screen.findByTestId("gallery");
    expect(within(gallery).getByAltText("reference 1")).toHaveAttribute("src", "/gallery/references/r1.png");
    await userEvent.click(screen.getByRole("button", { name: "Reuse these settings" }));
    const field = screen.getByTestId("reference-images");
    expect(within(field).getByRole("img")).toHaveAttribute("src", "/gallery/references/r1.png");
  });

  it("ties a refusal to the Add button and the file input, as their description (RELIABILITY 2060)", async () => {
    const user = userEvent.setup();
    const { rerender } = render(<ReferenceImages max={1} value={[]} onChange={() => undefined} />);
    const field = screen.getByTestId("reference-images");
    const add = within(field).getByRole("button", { name: "Add reference image" });
    const file = within(field).getByTestId("reference-input");
    expect(add).toHaveAccessibleDescription("");
    expect(file).not.toHaveAttribute("aria-invalid");
    // two files where one fits: refused here, before any upload
    await user.upload(file, [new File([new Uint8Array(4)], "a.png"), new File([new Uint8Array(4)], "b.png")]);
    const words = "this model takes at most 1 reference image";
    await waitFor(() => expect(add).toHaveAccessibleDescription(words));
    expect(file).toHaveAccessibleDescription(words);
    expect(file).toHaveAttribute("aria-invalid", "true");
    expect(screen.getByRole("alert")).toHaveTextContent(words);
    // the server's problem with the references (a 400's `references`) is tied the same way
    rerender(<ReferenceImages max={2} value={[]} onChange={() => undefined} error="reference 1: cannot decode the image" />);
    await user.upload(file, new File([new Uint8Array(4)], "c.png")); // fits: the local refusal goes
    await waitFor(() => expect(add).toHaveAccessibleDescription("reference 1: cannot decode the image"));
    expect(file).toHaveAttribute("aria-invalid", "true");
  });

  it("is hidden for a text-to-image family", () => {
    render(<ReferenceImages max={0} value={[]} onChange={() => undefined} />);
    expect(screen.queryByTestId("reference-images")).toBeNull();
  });
});
