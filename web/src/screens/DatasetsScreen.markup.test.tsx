import { render, screen, within } from "@testing-library/react";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { Info } from "../api/types";
import { DatasetEntries } from "../components/DatasetEntries";
import { DatasetSelect } from "../components/DatasetSelect";
import { emptyRow, rowsValue } from "../lib/datasetEntries";
import { MARKUP_UNCOUNTED } from "../lib/markupWords";
import { INFO, mockFetch } from "../test/fixtures";
import { renderWithProviders } from "../test/render";
import { DatasetsScreen } from "./DatasetsScreen";

afterEach(() => {
  vi.unstubAllGlobals();
  window.location.hash = "";
});

// RELIABILITY 1862: a dataset whose captions hold {trigger}-like text or kohya's ||| was listed
// as usable with nothing said; the listing's summary now counts them (markup_captions)
const MARKED = { name: "pets", path: "/d/pets", images: 4, captions: 4, markup_captions: 2, markup_counted: true, usable: true, problem: null };
const WORDS = "2 captions hold {trigger}-like text or kohya's |||, which a fresh run refuses";

describe("a dataset whose captions hold markup a fresh run refuses", () => {
  it("says how many in the Datasets list, under its captions count", async () => {
    const info: Info = { ...INFO, datasets: [...INFO.datasets, MARKED] };
    mockFetch(({ url }) => (url === "/api/info" ? { body: info } : undefined));
    renderWithProviders(<DatasetsScreen />, { training: false });
    const link = await screen.findByText("pets", { selector: "a" });
    const tr = link.closest("tr") as HTMLElement;
    expect(within(tr).getByTestId("markup-captions").textContent).toBe(WORDS);
    expect(screen.getAllByTestId("markup-captions")).toHaveLength(1); // shapes and faces: none
  });

  it("says so in the Train form's picker, and under it once picked, linking its page", () => {
    const datasets = [...INFO.datasets, MARKED];
    const { rerender } = render(<DatasetSelect datasets={datasets} value="shapes" onChange={() => {}} />);
    const option = screen.getByRole("option", { name: /^pets/ });
    expect(option.textContent).toBe(`pets (4 images) — ${WORDS}`);
    expect(screen.getByRole("option", { name: /^shapes/ }).textContent).toBe("shapes (8 images)");
    expect(screen.queryByTestId("dataset-markup")).toBeNull();
    rerender(<DatasetSelect datasets={datasets} value="pets" onChange={() => {}} />);
    const hint = screen.getByTestId("dataset-markup");
    expect(hint.textContent).toBe(`${WORDS}: its page names each under its image.`);
    expect(within(hint).getByRole("link").getAttribute("href")).toBe("#/datasets/pets");
  });

  it("says so in each folder picker of several dataset folders", () => {
    const value = rowsValue([emptyRow("shapes")]);
    render(<DatasetEntries value={value} dataDir="shapes" datasets={[...INFO.datasets, MARKED]} onChange={() => {}} />);
    expect(screen.getByRole("option", { name: /^pets/ }).textContent).toBe(`pets (4 images) — ${WORDS}`);
  });
});

// RELIABILITY 2072: a metadata.jsonl over 8 MB is not read by the listing; its rows' markup was a
// silent 0 in markup_captions
describe("a dataset whose metadata.jsonl the listing does not read", () => {
  const UNREAD = { ...MARKED, name: "big", markup_captions: 0, markup_counted: false };

  it("says its rows are not counted, in the Datasets list and under the Train form's picker", async () => {
    const info: Info = { ...INFO, datasets: [...INFO.datasets, UNREAD] };
    mockFetch(({ url }) => (url === "/api/info" ? { body: info } : undefined));
    renderWithProviders(<DatasetsScreen />, { training: false });
    const link = await screen.findByText("big", { selector: "a" });
    const tr = link.closest("tr") as HTMLElement;
    expect(within(tr).getByTestId("markup-uncounted").textContent).toBe(MARKUP_UNCOUNTED);
    expect(screen.getAllByTestId("markup-uncounted")).toHaveLength(1); // shapes and faces: counted
    render(<DatasetSelect datasets={info.datasets} value="big" onChange={() => {}} />);
    expect(screen.getByTestId("dataset-markup-uncounted").textContent).toBe(MARKUP_UNCOUNTED);
  });
});
