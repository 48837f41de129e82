import { screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { beforeEach, describe, expect, it, vi } from "vitest";
import type { DatasetDetail } from "../api/types";
import { type Call, datasetDetail, INFO, mockFetch } from "../test/fixtures";
import { renderWithProviders } from "../test/render";
import { stubXhr } from "../test/xhr";
import { DatasetDetailScreen } from "./DatasetDetailScreen";

/** Uploads answered when the test says (`finish`), each at 5 of 20 bytes sent meanwhile. */
function heldXhr() {
  const held: { finish: (body: unknown) => void }[] = [];
  stubXhr((_form, reply, progress) => {
    progress(5, 20);
    held.push({ finish: (body) => reply(201, body) });
  });
  return held;
}

const file = (name: string) => new File([new Uint8Array(10)], name);
const render = () => renderWithProviders(<DatasetDetailScreen name="mix" />, { training: false });

describe("DatasetDetailScreen: an upload while the user looks elsewhere", () => {
  let calls: Call[];
  let detail: DatasetDetail;
  beforeEach(() => {
    vi.unstubAllGlobals();
    detail = datasetDetail("mix");
    calls = mockFetch(({ url }) => {
      if (url === "/api/info") return { body: INFO };
      if (url === "/api/datasets/mix?limit=200") return { body: detail };
      return undefined;
    });
  });

  it("shows its progress when the page is opened again, and the files it stored when it ends", async () => {
    const held = heldXhr();
    const first = render();
    const user = userEvent.setup({ applyAccept: false });
    await user.upload(await screen.findByTestId("file-input"), [file("b.png"), file("b.txt")]);
    await screen.findByText("Uploading batch 1 of 1", { selector: ".upload-status span" }); // (also said in the page's live region)
    first.unmount(); // to Train and back, while the batch is sent

    render();
    await screen.findByText("a.png");
    expect(screen.getByText("Uploading batch 1 of 1", { selector: ".upload-status span" })).toBeInTheDocument();
    expect(screen.getByTestId("upload-announcement")).toHaveTextContent("Uploading batch 1 of 1");
    expect(document.querySelector(".dropzone")).toHaveClass("disabled"); // no second upload of the same files meanwhile
    const loads = calls.filter((c) => c.url === "/api/datasets/mix?limit=200").length;
    detail = { ...detail, images: 2, total_files: 2, files: [...detail.files, { file: "b.png", caption: "b", bytes: 10, width: 8, height: 8 }] };
    held[0].finish({ ...detail, committed: ["b.png", "b.txt"], refused: [] });
    expect(await screen.findByTestId("upload-summary")).toHaveTextContent("2 files stored");
    // the files reloaded once, by the page open now
    await waitFor(() => expect(calls.filter((c) => c.url === "/api/datasets/mix?limit=200").length).toBe(loads + 1));
    await waitFor(() => expect(screen.getByTestId("dataset-counts")).toHaveTextContent("2 images"));
    expect(held).toHaveLength(1);
  });
});
