/**
 * Inline disclosures keep the keyboard focus (RELIABILITY 1915): a button that becomes a form
 * (Train longer…, Push to hub…, Caption with AI, an unusable folder's Rename) moves the focus to
 * the form's first field when pressed, and its Cancel / Close gives it back to the button; before,
 * the pressed button was gone and the focus fell to the page's body.
 */
import { render, screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { Info, RunSummary } from "../api/types";
import { INFO, mockFetch } from "../test/fixtures";
import { renderWithProviders } from "../test/render";
import { DatasetsScreen } from "../screens/DatasetsScreen";
import { AutoCaptionPanel } from "./AutoCaptionPanel";
import { PushToHub } from "./PushToHub";
import { TrainLonger } from "./TrainLonger";

const RUN: RunSummary = {
  id: "abc123", output_name: "portrait", family: "flux", status: "completed", created_at: "2025-01-01T00:00:00Z",
  started_at: "2025-01-01T00:00:01Z", finished_at: "2025-01-01T00:10:00Z", steps_run: 1000, total_steps: 1000,
  last_loss: 0.1, error: null, resume_step: null, lora_file: true, train_longer: { from_step: 900, steps: 1000 },
};

afterEach(() => vi.unstubAllGlobals());

/** Press `button` with Enter, as a keyboard user does; the focus must land on `field`. Then Enter on
 * `close` (by name) must give it back to a button named as `button` was. */
async function opensAndCloses(button: HTMLElement, field: () => HTMLElement, close: string) {
  const name = button.getAttribute("aria-label") ?? button.textContent ?? "";
  button.focus();
  await userEvent.keyboard("{Enter}");
  expect(document.activeElement).toBe(field());
  screen.getByRole("button", { name: close }).focus();
  await userEvent.keyboard("{Enter}");
  expect(document.activeElement).toBe(screen.getByRole("button", { name }));
}

describe("an inline disclosure keeps the focus", () => {
  it("Train longer…: to the new total, back to the button on Cancel", async () => {
    render(<TrainLonger run={RUN} onStarted={vi.fn()} onError={vi.fn()} />);
    await opensAndCloses(screen.getByRole("button", { name: "Train longer: portrait" }), () => screen.getByRole("spinbutton", { name: "New total steps" }), "Cancel");
  });

  it("Push to hub…: to the repo id, back to the button on Close", async () => {
    render(<PushToHub name="portrait" />);
    await opensAndCloses(screen.getByRole("button", { name: "Push to hub: portrait" }), () => screen.getByRole("textbox", { name: "Repo id" }), "Close");
  });

  it("Caption with AI: to the model, back to the button on Close", async () => {
    mockFetch(() => undefined);
    render(<AutoCaptionPanel dataset="mix" onFinished={() => undefined} />);
    await opensAndCloses(screen.getByTestId("caption-ai"), () => screen.getByTestId("caption-model"), "Close");
  });

  it("Rename of an unusable folder: to its new name", async () => {
    const bad = { name: "what?", path: "/d/what?", images: 3, captions: 3, markup_captions: 0, markup_counted: true, usable: false, problem: "cannot use this name" };
    const info: Info = { ...INFO, datasets: [...INFO.datasets, bad] };
    mockFetch(({ url }) => (url === "/api/info" ? { body: info } : undefined));
    renderWithProviders(<DatasetsScreen />, { training: false });
    const rename = await screen.findByRole("button", { name: /^Rename/ });
    rename.focus();
    await userEvent.keyboard("{Enter}");
    await waitFor(() => expect(document.activeElement).toBe(screen.getByRole("textbox", { name: "new name for what?" })));
  });

  it("Escape closes each, as its Cancel / Close does, and gives the focus back (RELIABILITY 2273)", async () => {
    const escapes = async (button: HTMLElement, field: () => HTMLElement) => {
      const name = button.getAttribute("aria-label") ?? button.textContent ?? "";
      button.focus();
      await userEvent.keyboard("{Enter}");
      expect(document.activeElement).toBe(field());
      await userEvent.keyboard("{Escape}");
      expect(document.activeElement).toBe(screen.getByRole("button", { name }));
    };
    const train = render(<TrainLonger run={RUN} onStarted={vi.fn()} onError={vi.fn()} />);
    await escapes(screen.getByRole("button", { name: "Train longer: portrait" }), () => screen.getByRole("spinbutton", { name: "New total steps" }));
    train.unmount();
    const push = render(<PushToHub name="portrait" />);
    await escapes(screen.getByRole("button", { name: "Push to hub: portrait" }), () => screen.getByRole("textbox", { name: "Repo id" }));
    push.unmount();
    mockFetch(() => undefined);
    const caption = render(<AutoCaptionPanel dataset="mix" onFinished={() => undefined} />);
    await escapes(screen.getByTestId("caption-ai"), () => screen.getByTestId("caption-model"));
    caption.unmount();
    const bad = { name: "what?", path: "/d/what?", images: 3, captions: 3, markup_captions: 0, markup_counted: true, usable: false, problem: "cannot use this name" };
    mockFetch(({ url }) => (url === "/api/info" ? { body: { ...INFO, datasets: [...INFO.datasets, bad] } } : undefined));
    renderWithProviders(<DatasetsScreen />, { training: false });
    const rename = await screen.findByRole("button", { name: "Rename: what?" });
    rename.focus();
    await userEvent.keyboard("{Enter}");
    await waitFor(() => expect(document.activeElement).toBe(screen.getByRole("textbox", { name: "new name for what?" })));
    await userEvent.keyboard("{Escape}"); // the one way to close it: it has no Cancel
    await waitFor(() => expect(document.activeElement).toBe(screen.getByRole("button", { name: "Rename: what?" })));
  });

  it("moves nothing on mounting", () => {
    render(<PushToHub name="portrait" />);
    expect(document.activeElement).toBe(document.body);
  });
});
