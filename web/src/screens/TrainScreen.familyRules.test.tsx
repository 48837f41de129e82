/** The Train form follows the family rules /api/info serves (FamilyOut.attention_backends_refused,
 * max_sequence_length_max, refuses_on: the server's, from serverRules.gen.ts), not a copy. */
import { screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { beforeEach, describe, expect, it, vi } from "vitest";
import type { Info } from "../api/types";
import { type Call, INFO } from "../test/fixtures";
import { SERVER_RULES } from "../test/serverRules.gen";
import { cudaInfo, input, mockTrainServer, renderTrain } from "../test/trainServer";

const CHROMA: Info["families"][number] = { ...INFO.families[1], name: "chroma", title: "Chroma", ...SERVER_RULES.families.chroma };
const EDIT: Info["families"][number] = {
  ...INFO.families[1],
  name: "qwen-image-edit",
  title: "Qwen-Image-Edit",
  ...SERVER_RULES.families["qwen-image-edit"],
  control_images: [0, 3],
};

let info: Info = INFO;

const preflights = (calls: Call[]) => calls.filter((c) => c.url === "/api/train/preflight");

describe("TrainScreen: the family's served rules", () => {
  let calls: Call[];
  beforeEach(() => {
    vi.unstubAllGlobals();
    info = { ...cudaInfo(1), families: [...INFO.families, CHROMA, EDIT] };
    calls = mockTrainServer(() => info);
  });

  it("greys out the attention kernel the family refuses (Chroma: cudnn) and caps its text tokens", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    const disabled = () => [...(input("attention_backend") as unknown as HTMLSelectElement).options].filter((o) => o.disabled).map((o) => o.value);
    expect(disabled()).toEqual([]); // FLUX.1 on a CUDA host
    expect(input("max_sequence_length")).toHaveAttribute("max", String(SERVER_RULES.families.flux.max_sequence_length_max));

    await userEvent.click(screen.getByRole("radio", { name: "Chroma" }));
    expect(disabled()).toEqual(SERVER_RULES.families.chroma.attention_backends_refused);
    expect(disabled()).toEqual(["cudnn"]);
    expect(input("attention_backend").closest("label")).toHaveTextContent("Chroma refuses cudnn");
    expect(input("max_sequence_length")).toHaveAttribute("max", "512");

    await userEvent.type(input("base_model"), "lodestones/Chroma1-HD");
    await userEvent.clear(input("max_sequence_length"));
    await userEvent.type(input("max_sequence_length"), "600");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    expect(await screen.findByText("Chroma reads at most 512 tokens")).toBeInTheDocument();
    // refused in the form, as the server would; the server judges the rest without it
    await waitFor(() => expect(preflights(calls)).toHaveLength(1));
    expect((preflights(calls)[0].body as { config: Record<string, unknown> }).config).not.toHaveProperty("max_sequence_length");
    expect(screen.queryByTestId("preflight")).toBeNull();

    await userEvent.clear(input("max_sequence_length"));
    await userEvent.type(input("max_sequence_length"), "512");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await screen.findByTestId("preflight");
    expect((preflights(calls).pop()?.body as { config: Record<string, unknown> }).config.max_sequence_length).toBe(512);
  });

  it("hides random_flip for Qwen-Image-Edit and never sends it there", async () => {
    renderTrain();
    await waitFor(() => expect(input("lora_rank")).toHaveValue("32"));
    expect(input("random_flip")).not.toBeNull();
    await userEvent.click(input("random_flip"));
    expect(input("random_flip")).toBeChecked();

    await userEvent.click(screen.getByRole("radio", { name: "Qwen-Image-Edit" }));
    expect(input("random_flip")).toBeNull();
    expect(input("random_crop")).not.toBeNull();
    await userEvent.type(input("base_model"), "Qwen/Qwen-Image-Edit");
    await userEvent.click(screen.getByRole("button", { name: "Check" }));
    await screen.findByTestId("preflight");
    expect((preflights(calls).pop()?.body as { config: Record<string, unknown> }).config).not.toHaveProperty("random_flip");
  });
});
