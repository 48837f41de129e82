import { screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { type Call, galleryImage, INFO, mockFetch } from "../test/fixtures";
import { GenerateScreen } from "./GenerateScreen";
import { renderWithProviders } from "../test/render";

const input = (name: string) => document.querySelector(`[name="${name}"]`) as HTMLInputElement;
const posted = (calls: Call[]) => calls.filter((c) => c.method === "POST" && c.url === "/api/generations").map((c) => c.body as Record<string, unknown>);

// RELIABILITY 1820: the screen started at 512 x 512 and 20 steps for every family, the API and the CLI at the family's
describe("GenerateScreen: the family's steps and size", () => {
  let calls: Call[];
  beforeEach(() => {
    vi.unstubAllGlobals();
    window.sessionStorage.clear();
    calls = mockFetch(({ method, url }) => {
      if (url === "/api/info") return { body: INFO };
      if (url.startsWith("/api/train/status")) return { body: { job: null, queue: [], busy: false, event_seq: 0 } };
      if (url.startsWith("/api/loras?family=")) return { body: { root: "/o", loras: [] } };
      if (url === "/api/gallery") return { body: { images: [{ ...galleryImage([]), steps: null }] } };
      if (method === "POST" && url === "/api/generations") {
        return { status: 201, body: { file: "n.png", url: "/gallery/n.png", path: "/g/n.png", seconds: 1, seed: 0, width: 64, height: 64, prompt: "p", loras: [] } };
      }
      return undefined;
    });
  });

  it("shows the family's (following a family change) and leaves them to the server until typed", async () => {
    renderWithProviders(<GenerateScreen />);
    await waitFor(() => expect(input("gen_width")).toBeInTheDocument());
    expect(input("gen_width")).toHaveValue("");
    expect(input("gen_width")).toHaveAttribute("placeholder", "512"); // the fixture's FLUX.1
    expect(input("gen_steps")).toHaveAttribute("placeholder", "28");
    await userEvent.click(screen.getByRole("radio", { name: "Stable Diffusion XL" }));
    expect(input("gen_height")).toHaveAttribute("placeholder", "1024");
    expect(input("gen_steps")).toHaveAttribute("placeholder", "30");
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    await waitFor(() => expect(posted(calls)).toHaveLength(1));
    const sent = posted(calls)[0];
    expect(sent.family).toBe("sdxl");
    expect(["steps", "width", "height"].filter((k) => k in sent)).toEqual([]); // the server's: the family's
    await userEvent.type(input("gen_width"), "768");
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    await waitFor(() => expect(posted(calls)).toHaveLength(2));
    expect(posted(calls)[1]).toMatchObject({ width: 768 });
    expect("height" in posted(calls)[1]).toBe(false);
  });

  it("a field left to the family says so in its description, not by its placeholder alone (RELIABILITY 1842)", async () => {
    renderWithProviders(<GenerateScreen />);
    await waitFor(() => expect(input("gen_width")).toBeInTheDocument());
    expect(input("gen_steps")).toHaveAccessibleDescription("empty: the family's 28");
    expect(input("gen_width")).toHaveAccessibleDescription("empty: the family's 512");
    await userEvent.click(screen.getByRole("radio", { name: "Stable Diffusion XL" }));
    expect(input("gen_height")).toHaveAccessibleDescription("empty: the family's 1024");
    expect(input("gen_seed")).not.toHaveAttribute("aria-describedby"); // a field with a value of its own: none
  });

  it("a saved draft keeps its steps and size", async () => {
    const draft = { family: "sdxl", baseModel: "/m/sdxl", prompt: "p", seed: "0", steps: "12", width: "256", height: "384" };
    window.sessionStorage.setItem("lorastudio.draft.generate", JSON.stringify(draft));
    renderWithProviders(<GenerateScreen />);
    await waitFor(() => expect(input("gen_width")).toHaveValue("256"));
    expect(input("gen_steps")).toHaveValue("12");
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    await waitFor(() => expect(posted(calls)).toHaveLength(1));
    expect(posted(calls)[0]).toMatchObject({ steps: 12, width: 256, height: 384 });
  });

  it("reusing an image rendered at the family's steps (steps null) clears the steps typed", async () => {
    renderWithProviders(<GenerateScreen />);
    const gallery = await screen.findByTestId("gallery");
    await userEvent.type(input("gen_steps"), "12");
    await userEvent.click(within(gallery).getByRole("button", { name: /an old cat/ }));
    await userEvent.click(screen.getByRole("button", { name: "Reuse these settings" }));
    expect(input("gen_steps")).toHaveValue("");
    expect(input("gen_width")).toHaveValue("64");
  });
});
