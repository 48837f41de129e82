import { render, screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import { mockFetch } from "../test/fixtures";
import { CaptionCard } from "./CaptionCard";

const IMAGE = { file: "a.png", caption: "a red square", controls: [], mask: null, bytes: 10, width: 8, height: 8, alpha: false };

describe("CaptionCard: two editors of one caption", () => {
  afterEach(() => vi.unstubAllGlobals());

  it("sends the caption it started from; a 409 shows the one there now and lets the user keep theirs or take it", async () => {
    let onDisk = "another tab's words";
    const calls = mockFetch(({ method, url, body }) => {
      if (method !== "PUT" || url !== "/api/datasets/ds/captions/a.png") return undefined;
      const { caption, expected } = body as { caption: string; expected?: string };
      if (expected !== onDisk) {
        return { status: 409, body: { error: "CaptionConflict", detail: `the caption of a.png changed since it was read (another tab or person): it is now '${onDisk}'; nothing was written`, current: onDisk } };
      }
      onDisk = caption;
      return { body: { file: "a.png", caption, caption_file: "a.txt" } };
    });
    render(<CaptionCard dataset="ds" image={IMAGE} onRemoved={() => undefined} />);
    const box = screen.getByLabelText("caption of a.png");
    await userEvent.clear(box);
    await userEvent.type(box, "my words");
    box.blur();
    const alert = await screen.findByRole("alert");
    expect(alert).toHaveTextContent("changed since it was read");
    expect(alert).toHaveTextContent("another tab's words");
    expect(calls[0].body).toEqual({ caption: "my words", expected: "a red square" });
    expect(onDisk).toBe("another tab's words"); // nothing overwritten
    expect(box).toHaveValue("my words"); // the user's words are kept in the box

    await userEvent.click(screen.getByRole("button", { name: "Keep mine" }));
    await waitFor(() => expect(onDisk).toBe("my words"));
    expect(screen.queryByRole("alert")).toBeNull();

    // later the other tab writes again; this time the user takes theirs
    onDisk = "newer words";
    await userEvent.type(box, "!");
    box.blur();
    await screen.findByRole("alert");
    await userEvent.click(screen.getByRole("button", { name: "Use theirs" }));
    expect(box).toHaveValue("newer words");
    expect(onDisk).toBe("newer words");
    expect(screen.queryByRole("alert")).toBeNull();
  });

  it("says a save to a screen reader: 'saved' in a polite region that was there before (RELIABILITY 798)", async () => {
    mockFetch(({ method, body }) => (method === "PUT" ? { body: { file: "a.png", caption: (body as { caption: string }).caption, caption_file: "a.txt" } } : undefined));
    render(<CaptionCard dataset="ds" image={IMAGE} onRemoved={() => undefined} />);
    const region = screen.getByRole("status");
    expect(region).toHaveAttribute("aria-live", "polite");
    const box = screen.getByLabelText("caption of a.png");
    await userEvent.type(box, ", on grass");
    box.blur();
    await waitFor(() => expect(region).toHaveTextContent("saved"));
    expect(screen.getByRole("status")).toBe(region); // the same region: its change is what is read
  });
});

describe("CaptionCard: a caption typed and not saved yet", () => {
  afterEach(() => vi.unstubAllGlobals());

  /** Whether the browser would ask before this tab is reloaded or closed. */
  function asks(): boolean {
    const e = new Event("beforeunload", { cancelable: true });
    window.dispatchEvent(e);
    return e.defaultPrevented;
  }

  it("makes the browser ask before a reload or a closed tab loses it, until it is saved (RELIABILITY 1416)", async () => {
    mockFetch(({ method, body }) => (method === "PUT" ? { body: { file: "a.png", caption: (body as { caption: string }).caption, caption_file: "a.txt" } } : undefined));
    const { unmount } = render(<CaptionCard dataset="ds" image={IMAGE} onRemoved={() => undefined} />);
    const box = screen.getByLabelText("caption of a.png");
    expect(asks()).toBe(false);
    await userEvent.type(box, " by hand");
    expect(asks()).toBe(true); // a reload now fires no blur: the words would be lost unasked
    box.blur();
    await screen.findByText("saved");
    // the hold is let go by the card's effect after the render that says "saved" (a passive effect:
    // on a loaded host the text can be read before it has run)
    await waitFor(() => expect(asks()).toBe(false));
    await userEvent.type(box, " again");
    expect(asks()).toBe(true);
    unmount(); // the screen left (its blur saved it): no question held for a card that is gone
    expect(asks()).toBe(false);
  });
});

describe("CaptionCard: a caption a fresh run refuses", () => {
  afterEach(() => vi.unstubAllGlobals());
  const TRIGGER = "holds {trigger}, which is not replaced: the trigger word's place is written [trigger]";
  const KOHYA = "holds |||, kohya's keep_tokens_separator, which is not read (it would train as text): put the tags to keep first and set keep_tokens to their count";

  it("says why next to the caption (the detail's markup), hidden once edited and saved", async () => {
    mockFetch(({ method, body }) => {
      if (method !== "PUT") return undefined;
      const { caption } = body as { caption: string };
      if (caption.includes("|||")) return { status: 400, body: { error: "DatasetError", detail: `caption of a.png refused\n  - a.png: the caption ${KOHYA}` } };
      return { body: { file: "a.png", caption, caption_file: "a.txt" } };
    });
    render(<CaptionCard dataset="ds" image={{ ...IMAGE, caption: "{trigger}, a square", markup: TRIGGER }} onRemoved={() => undefined} />);
    expect(screen.getByTestId("markup-of-a.png")).toHaveTextContent(`A fresh run refuses this caption: it ${TRIGGER}.`);
    const box = screen.getByLabelText("caption of a.png");
    await userEvent.clear(box);
    await userEvent.type(box, "[trigger], a square");
    expect(screen.queryByTestId("markup-of-a.png")).toBeNull(); // edited: the words were the old text's
    box.blur();
    await screen.findByText("saved");
    expect(screen.queryByTestId("markup-of-a.png")).toBeNull(); // saved: the edit refuses markup (400), so none
    await userEvent.clear(box);
    await userEvent.type(box, "red ||| blue"); // the edit's own refusal names it
    box.blur();
    expect(await screen.findByRole("alert")).toHaveTextContent(KOHYA);
  });

  it("says nothing for a caption without markup", () => {
    render(<CaptionCard dataset="ds" image={{ ...IMAGE, markup: null }} onRemoved={() => undefined} />);
    expect(screen.queryByTestId("markup-of-a.png")).toBeNull();
  });
});

describe("CaptionCard: a kohya layout's image (RELIABILITY 2201)", () => {
  afterEach(() => vi.unstubAllGlobals());

  it("shows its folder's repeats and reaches its thumbnail and caption under `<folder>/<name>`, the / kept", async () => {
    const calls = mockFetch(({ method, url, body }) => {
      if (method !== "PUT" || url !== "/api/datasets/k/captions/10_sks/a%20b.png") return undefined;
      return { body: { file: "10_sks/a b.png", caption: (body as { caption: string }).caption, caption_file: "a b.txt" } };
    });
    const image = { ...IMAGE, file: "10_sks/a b.png", caption: null, repeats: 10 };
    render(<CaptionCard dataset="k" image={image} onRemoved={() => undefined} />);
    expect(screen.getByTestId("repeats-of-10_sks/a b.png")).toHaveTextContent("×10");
    expect(screen.getByAltText("10_sks/a b.png").getAttribute("src")).toContain("/api/datasets/k/thumbnails/10_sks/a%20b.png?");
    const box = screen.getByLabelText("caption of 10_sks/a b.png");
    await userEvent.type(box, "a ball");
    box.blur();
    await screen.findByText("saved");
    expect(calls.map((c) => c.url)).toContain("/api/datasets/k/captions/10_sks/a%20b.png");
  });

  it("shows no repeats for an image of a plain dataset", () => {
    render(<CaptionCard dataset="ds" image={IMAGE} onRemoved={() => undefined} />);
    expect(screen.queryByTestId("repeats-of-a.png")).toBeNull();
  });
});
