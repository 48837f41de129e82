/** The Generate screen's gallery a page at a time (RELIABILITY 745): the newest page first with
 * the gallery's count, "Show more" for the next page, and after a generation the new image shown
 * by loading the newest page only, the older pages shown before kept (never the whole list again). */
import { screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { beforeEach, describe, expect, it, vi } from "vitest";
import type { GalleryImage } from "../api/types";
import { mergeNewest } from "../lib/gallery";
import { type Call, galleryImage, INFO, mockFetch } from "../test/fixtures";
import { renderWithProviders } from "../test/render";
import { GenerateScreen } from "./GenerateScreen";

const PAGE = 3;
const image = (n: number): GalleryImage => ({
  ...galleryImage([]),
  file: `img${String(n).padStart(3, "0")}.png`,
  url: `/gallery/img${n}.png`,
  created: n,
  prompt: `prompt ${n}`,
});

/** The server's paging over `all` (newest first): PAGE images a page, the cursor the page's last file. */
function page(all: GalleryImage[], cursor: string | null) {
  const start = cursor == null ? 0 : all.findIndex((i) => i.file === cursor) + 1;
  const images = all.slice(start, start + PAGE);
  const more = start + PAGE < all.length;
  return { images, total: all.length, next_cursor: more ? images[images.length - 1].file : null };
}

const titles = () => within(screen.getByTestId("gallery")).getAllByRole("button").map((b) => b.getAttribute("title"));

describe("GenerateScreen: the gallery's pages", () => {
  let calls: Call[];
  let all: GalleryImage[];
  beforeEach(() => {
    vi.unstubAllGlobals();
    all = [8, 7, 6, 5, 4, 3, 2, 1].map(image);
    calls = mockFetch(({ method, url }) => {
      if (url === "/api/info") return { body: INFO };
      if (url.startsWith("/api/train/status")) return { body: { job: null, queue: [], busy: false, event_seq: 0 } };
      if (url.startsWith("/api/loras?")) return { body: { root: "/o", loras: [] } };
      if (url === "/api/gallery") return { body: page(all, null) };
      const cursor = url.match(/^\/api\/gallery\?cursor=(.+)$/)?.[1];
      if (cursor) return { body: page(all, decodeURIComponent(cursor)) };
      if (method === "POST" && url === "/api/generations") {
        all = [image(9), ...all];
        return { status: 201, body: { file: image(9).file, url: image(9).url, path: "/g/img009.png", seconds: 1, seed: 7, width: 64, height: 64, prompt: "prompt 9", loras: [] } };
      }
      return undefined;
    });
  });

  it("shows the first page, loads more on request, and shows a new image without loading every page again", async () => {
    renderWithProviders(<GenerateScreen />);
    await waitFor(() => expect(titles()).toEqual(["prompt 8", "prompt 7", "prompt 6"]));
    expect(screen.getByText("3 of 8 images")).toBeInTheDocument();
    await userEvent.click(screen.getByRole("button", { name: "Show more" }));
    await waitFor(() => expect(titles()).toHaveLength(6));
    expect(calls.map((c) => c.url)).toContain("/api/gallery?cursor=img006.png");
    await userEvent.click(screen.getByRole("button", { name: "Show more" }));
    await waitFor(() => expect(titles()).toHaveLength(8));
    expect(screen.getByText("8 images")).toBeInTheDocument();
    expect(screen.queryByRole("button", { name: "Show more" })).toBeNull(); // the last page
    const before = calls.length;
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    await waitFor(() => expect(titles()[0]).toBe("prompt 9"));
    expect(titles()).toEqual([9, 8, 7, 6, 5, 4, 3, 2, 1].map((n) => `prompt ${n}`));
    expect(screen.getByText("9 images")).toBeInTheDocument();
    // one page asked for after the generation: the newest (the older pages are kept, not asked again)
    expect(calls.slice(before).filter((c) => c.url.startsWith("/api/gallery"))).toHaveLength(1);
    expect(screen.queryByRole("button", { name: "Show more" })).toBeNull(); // every image is still shown
  });

  it("a generation with only the first page shown keeps what was shown under the new image, and more from there", async () => {
    renderWithProviders(<GenerateScreen />);
    await waitFor(() => expect(titles()).toEqual(["prompt 8", "prompt 7", "prompt 6"]));
    await userEvent.click(screen.getByRole("button", { name: "Generate" }));
    await waitFor(() => expect(titles()).toEqual([9, 8, 7, 6].map((n) => `prompt ${n}`)));
    expect(screen.getByText("4 of 9 images")).toBeInTheDocument();
    await userEvent.click(screen.getByRole("button", { name: "Show more" }));
    await waitFor(() => expect(titles()).toEqual([9, 8, 7, 6, 5, 4, 3].map((n) => `prompt ${n}`))); // none repeated or skipped
  });
});

describe("mergeNewest", () => {
  const shown = { images: [5, 4, 3, 2, 1].map(image), cursor: null, total: 5 };
  it("keeps the older pages after a newest page that overlaps them, dropping one deleted meanwhile", () => {
    const merged = mergeNewest(shown, { images: [6, 5, 3].map(image), total: 5, next_cursor: "c" });
    expect(merged.images.map((i) => i.created)).toEqual([6, 5, 3, 2, 1]); // 4 was deleted
    expect(merged.cursor).toBeNull();
  });
  it("shows the newest page alone when more images were made than a page holds (no gap shown)", () => {
    const merged = mergeNewest(shown, { images: [9, 8, 7].map(image), total: 8, next_cursor: "c" });
    expect(merged).toEqual({ images: [9, 8, 7].map(image), cursor: "c", total: 8 });
  });
});
