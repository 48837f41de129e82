/**
 * Generate says which trigger word a picked LoRA was trained with when the prompt lacks it, and
 * adds it on request (RELIABILITY 1412): the LoRA list never named it, so a user generated with
 * "a red circle" and saw little of a LoRA trained on "sks".
 */
// @ts-expect-error -- node's fs (vitest runs the tests in node); the web's tsconfig has no node types
import { readFileSync } from "node:fs";
import { screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { holdsWord } from "../components/TriggerWords";
import { type Call, INFO, mockFetch } from "../test/fixtures";
import { renderWithProviders } from "../test/render";
import { GenerateScreen } from "./GenerateScreen";

const lora = (name: string, trigger: string | null) => ({
  name, family: "flux", path: `/o/${name}/${name}.safetensors`, bytes: 2048, modified: 1,
  sidecar: { format: "lorastudio.lora/1", trigger_word: trigger, steps: 20 },
}); // fmt: skip

describe("Generate: a picked LoRA's trigger word", () => {
  let calls: Call[];
  beforeEach(() => {
    vi.unstubAllGlobals();
    calls = mockFetch(({ url }) => {
      if (url === "/api/info") return { body: INFO };
      if (url.startsWith("/api/train/status")) return { body: { job: null, queue: [], busy: false, event_seq: 0 } };
      if (url === "/api/loras?family=flux") return { body: { root: "/o", loras: [lora("cats", "sks"), lora("plain", null)] } };
      if (url === "/api/gallery") return { body: { images: [] } };
      return undefined;
    });
  });

  it("names the word the prompt lacks, adds it first, and says nothing once it is there", async () => {
    renderWithProviders(<GenerateScreen />);
    await userEvent.click(await screen.findByRole("checkbox", { name: "use LoRA plain" }));
    const prompt = document.querySelector('[name="prompt"]') as HTMLTextAreaElement;
    expect(screen.queryByTestId("trigger-words")).toBeNull(); // trained without one
    await userEvent.click(screen.getByRole("checkbox", { name: "use LoRA cats" }));
    const hint = await screen.findByTestId("trigger-words");
    // a LoRA name or word of one long token wraps, its button too: at 320 px the hint stuck out 54 px (RELIABILITY 1546)
    expect(hint).toHaveClass("trigger-words");
    const css: string = readFileSync("src/styles.css", "utf8");
    expect(css).toMatch(/^\.trigger-words \{[^}]*overflow-wrap: anywhere;/m);
    expect(css).toMatch(/^\.trigger-words button \{[^}]*white-space: normal;/m);
    expect(hint).toHaveTextContent("cats was trained with the trigger word sks, which the prompt does not hold.");
    const before = prompt.value;
    await userEvent.click(screen.getByRole("button", { name: "Add “sks”" }));
    expect(prompt.value).toBe(`sks, ${before}`);
    expect(prompt).toHaveFocus(); // the button gone with the hint: was the page's body (RELIABILITY 1545)
    await waitFor(() => expect(screen.queryByTestId("trigger-words")).toBeNull());
    // typed by hand, in another case: held too
    await userEvent.clear(prompt);
    await userEvent.type(prompt, "a SKS dog");
    expect(screen.queryByTestId("trigger-words")).toBeNull();
    await userEvent.clear(prompt);
    await userEvent.type(prompt, "it asks");
    expect(screen.getByTestId("trigger-words")).toBeInTheDocument();
    expect(calls.some((c) => c.url === "/api/generations")).toBe(false);
  });

  it("matches the word as a word of its own", () => {
    expect(holdsWord("sks, a cat", "sks")).toBe(true);
    expect(holdsWord("a photo of ohwx person", "ohwx person")).toBe(true);
    expect(holdsWord("asks", "sks")).toBe(false);
    expect(holdsWord("sks_2 style", "sks")).toBe(false);
    expect(holdsWord("a (sks) cat", "sks")).toBe(true);
    expect(holdsWord("x", "a.b")).toBe(false); // the word's characters are literal
  });
});
