import { screen, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import { INFO, mockFetch } from "../test/fixtures";
import { DatasetsScreen } from "./DatasetsScreen";
import { renderWithProviders } from "../test/render";

afterEach(() => {
  vi.unstubAllGlobals();
  window.location.hash = "";
});

async function submit(name: string) {
  const calls = mockFetch(({ url }) => (url === "/api/info" ? { body: INFO } : undefined));
  renderWithProviders(<DatasetsScreen />, { training: false });
  const user = userEvent.setup();
  const field = await screen.findByLabelText("new dataset name");
  await user.type(field, name);
  await user.click(screen.getByRole("button", { name: /create/i }));
  return calls;
}

describe("DatasetsScreen new dataset name", () => {
  it("refuses a name starting with '-' with the server's reason (data/paths.new_name) and goes nowhere", async () => {
    const calls = await submit("-x");
    expect(screen.getByRole("alert").textContent).toBe(
      "'-x' must not start with '-': a command line would read it as an option; pick another name",
    );
    // RELIABILITY 1918: the refusal is the field's description, the field invalid
    const field = screen.getByRole("textbox", { name: "new dataset name" });
    expect(field).toHaveAttribute("aria-invalid", "true");
    expect(field).toHaveAccessibleDescription(/^'-x' must not start with '-'/);
    expect(window.location.hash).toBe("");
    expect(calls.map((c) => c.url)).toEqual(["/api/info"]); // nothing sent but the page's info
  });

  it("opens a new dataset with a non-ASCII name the server takes", async () => {
    await submit("café-猫");
    expect(screen.queryByRole("alert")).toBeNull();
    expect(decodeURIComponent(window.location.hash)).toBe("#/datasets/café-猫");
  });

  it("refuses what the server refuses, with its reason", async () => {
    await submit("a<b");
    expect(screen.getByRole("alert").textContent).toBe('must not contain any of " * : < > ? |');
    expect(window.location.hash).toBe("");
  });

  it("opens the new dataset for a good name", async () => {
    await submit("cats");
    expect(screen.queryByRole("alert")).toBeNull();
    expect(window.location.hash).toBe("#/datasets/cats");
  });
});

describe("DatasetsScreen captions count", () => {
  it("tells a screen reader, not only the eye (a dot), that images have no caption (RELIABILITY 1912)", async () => {
    mockFetch(({ url }) => (url === "/api/info" ? { body: INFO } : undefined));
    renderWithProviders(<DatasetsScreen />, { training: false });
    const faces = (await screen.findByRole("link", { name: "faces" })).closest("tr") as HTMLElement; // 20 images, 12 captions
    expect(within(faces).getByRole("img", { name: "8 images have no caption" })).toBeInTheDocument();
    const shapes = screen.getByRole("link", { name: "shapes" }).closest("tr") as HTMLElement; // all 8 captioned
    expect(within(shapes).queryByRole("img")).toBeNull();
  });
});
