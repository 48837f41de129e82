import { screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { DatasetDetail } from "../api/types";
import { INFO, mockFetch } from "../test/fixtures";
import { DatasetDetailScreen } from "./DatasetDetailScreen";
import { renderWithProviders } from "../test/render";

const DETAIL: DatasetDetail = {
  name: "mix",
  path: "/d/mix",
  usable: true,
  problem: null,
  images: 2,
  captions: 2,
  markup_captions: 0, markup_counted: true,
  masked: 0,
  with_alpha: 0,
  total_files: 2,
  offset: 0,
  limit: 200,
  files: [
    { file: "a.png", caption: "a dog", bytes: 1, width: 8, height: 8 },
    { file: "b.png", caption: "a cat", bytes: 1, width: 8, height: 8 },
  ],
  dropped: [],
};

describe("bulk caption edit", () => {
  afterEach(() => vi.unstubAllGlobals());

  it("previews with a dry run, then applies and reloads the captions", async () => {
    let captions = DETAIL.files;
    const calls = mockFetch(({ url, method, body }) => {
      if (url === "/api/info") return { body: INFO };
      if (url === "/api/datasets/mix?limit=200" && method === "GET") return { body: { ...DETAIL, files: captions } };
      if (url === "/api/datasets/mix/captions" && method === "POST") {
        const b = body as { find: string; replace: string; prepend: string; dry_run: boolean };
        const after = (c: string) => b.prepend + c.replaceAll(b.find, b.replace);
        if (!b.dry_run) captions = captions.map((f) => ({ ...f, caption: after(f.caption ?? "") }));
        return {
          body: {
            changed: 1, captions: 2, files: ["a.png"], written: !b.dry_run,
            examples: [{ file: "a.png", before: "a dog", after: after("a dog") }],
          },
        };
      }
      return undefined;
    });
    renderWithProviders(<DatasetDetailScreen name="mix" />, { training: false });
    await screen.findByTestId("bulk-captions");
    await userEvent.click(screen.getByText("Edit all captions"));
    await userEvent.type(screen.getByLabelText("Find"), "dog");
    await userEvent.type(screen.getByLabelText("Replace with"), "sks dog");
    const said = screen.getByTestId("bulk-announcement");
    expect(said).toHaveAttribute("role", "status");
    await userEvent.click(screen.getByRole("button", { name: "Preview" }));
    expect(await screen.findByTestId("bulk-result")).toHaveTextContent("Would change 1 of 2 caption(s).");
    expect(said).toHaveTextContent(/^Would change 1 of 2 caption\(s\)\.$/);
    expect(screen.getByTestId("bulk-result")).toHaveTextContent("a.png: a dog → a sks dog");
    await userEvent.click(screen.getByRole("button", { name: "Apply to all captions" }));
    await waitFor(() => expect(screen.getByTestId("bulk-result")).toHaveTextContent("Changed 1 of 2 caption(s)."));
    expect(said).toHaveTextContent(/^Changed 1 of 2 caption\(s\)\.$/); // RELIABILITY 1913: the answers said
    const posts = calls.filter((c) => c.url === "/api/datasets/mix/captions").map((c) => c.body);
    expect(posts).toEqual([
      { find: "dog", replace: "sks dog", prepend: "", append: "", dry_run: true },
      { find: "dog", replace: "sks dog", prepend: "", append: "", dry_run: false },
    ]);
    await waitFor(() => expect(calls.filter((c) => c.url === "/api/datasets/mix?limit=200").length).toBeGreaterThan(1)); // reloaded
    await waitFor(() => expect(screen.getAllByRole("textbox").some((t) => (t as HTMLTextAreaElement).value === "a sks dog")).toBe(true));
  });
});
