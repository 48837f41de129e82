/** Generate under slow answers (RELIABILITY 155, 157): a family's LoRAs answered after another
 * family was picked are not listed, and a double submit sends one generation. */
import { act, fireEvent, screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import { type Call, deferFetch, type Held, INFO } from "../test/fixtures";
import { GenerateScreen } from "./GenerateScreen";
import { renderWithProviders } from "../test/render";

const lora = (name: string, family: string) => ({ name, family, path: `/o/${name}/${name}.safetensors`, bytes: 2048, modified: 1, sidecar: null });

/** Everything but the held routes, answered at once. */
function server({ url, method }: Call) {
  if (url === "/api/info") return { body: INFO };
  if (url.startsWith("/api/train/status")) return { body: { job: null, queue: [], busy: false, event_seq: 0 } };
  if (url === "/api/gallery") return { body: { images: [] } };
  if (url.startsWith("/api/loras?") || (method === "POST" && url === "/api/generations")) return undefined; // held
  return { status: 404, body: { detail: "not found" } };
}

const renderScreen = () =>
  renderWithProviders(<GenerateScreen />);

afterEach(() => vi.unstubAllGlobals());

describe("GenerateScreen: slow answers", () => {
  it("the LoRAs of the family picked before, answered last, are not listed under the family picked now", async () => {
    const { held } = deferFetch(server);
    renderScreen();
    await screen.findByRole("radio", { name: "Stable Diffusion XL" });
    let flux: Held | undefined;
    await waitFor(() => (flux = held("/api/loras?family=flux")));
    await userEvent.click(screen.getByRole("radio", { name: "Stable Diffusion XL" }));
    await act(async () => held("/api/loras?family=sdxl").answer({ root: "/o", loras: [lora("dogs-xl", "sdxl")] }));
    expect(await screen.findByText(/dogs-xl/)).toBeInTheDocument();
    await act(async () => flux?.answer({ root: "/o", loras: [lora("cats-flux", "flux")] }));
    expect(screen.queryByText(/cats-flux/)).toBeNull();
    expect(screen.getByText(/dogs-xl/)).toBeInTheDocument();
  });

  it("submitting twice before the first answer sends one generation", async () => {
    const { calls } = deferFetch(server);
    renderScreen();
    const button = await screen.findByRole("button", { name: "Generate" });
    const form = button.closest("form") as HTMLFormElement;
    act(() => {
      fireEvent.submit(form); // Ctrl+Enter in the prompt...
      fireEvent.submit(form); // ...and a click on Generate, before React re-rendered
    });
    await waitFor(() => expect(screen.getByRole("button", { name: "Generating…" })).toBeDisabled());
    expect(calls.filter((c) => c.url === "/api/generations")).toHaveLength(1);
  });
});
