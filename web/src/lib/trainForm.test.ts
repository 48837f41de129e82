import { describe, expect, it } from "vitest";
import { INFO } from "../test/fixtures";
import { buildConfig, initialValues } from "./trainForm";

const flux = INFO.families[1];
const sdxl = INFO.families[0];

describe("train form", () => {
  it("starts from the family's defaults over the config's", () => {
    const v = initialValues(flux);
    expect(v.learning_rate).toBe("0.0004");
    expect(v.lora_rank).toBe("32");
    expect(v.batch_size).toBe("1");
    expect(v.aspect_buckets).toBe(true);
  });

  it("builds a config: numbers parsed, steps vs epochs, unsupported family fields left out", () => {
    const v = { ...initialValues(sdxl), base_model: "m", data_dir: "shapes", guidance: "3" };
    const steps = buildConfig({ ...v, unit: "steps", length: "250" }, sdxl);
    expect(steps.problems).toEqual({});
    expect(steps.config).toMatchObject({ family: "sdxl", steps: 250, num_epochs: 0, lora_rank: 16, snr_gamma: 5 });
    expect(steps.config).not.toHaveProperty("guidance");
    const epochs = buildConfig({ ...v, unit: "epochs", length: "3" }, sdxl);
    expect(epochs.config.num_epochs).toBe(3);
    expect(epochs.config).not.toHaveProperty("steps");
  });

  it("reports bad numbers and missing required fields before asking the server", () => {
    const v = { ...initialValues(flux), base_model: "", data_dir: "d", lora_rank: "1.5", learning_rate: "fast" };
    const { problems } = buildConfig({ ...v, length: "0" }, flux);
    expect(problems).toMatchObject({
      base_model: "required",
      lora_rank: "must be a whole number",
      learning_rate: "must be a number",
      steps: expect.stringMatching(/at least 1/),
    });
  });

  it("sends sample prompts one per non-blank line, with their step settings", () => {
    const v = { ...initialValues(flux), base_model: "m", data_dir: "d" };
    const none = buildConfig({ ...v, sample_prompts: " \n\n" }, flux);
    expect(none.config).not.toHaveProperty("sample_prompts");
    const built = buildConfig(
      { ...v, sample_prompts: "  a red circle \n\na blue square\n", sample_every: "50", sample_steps: "2.5" },
      flux,
    );
    expect(built.config.sample_prompts).toEqual(["a red circle", "a blue square"]);
    expect(built.config.sample_every).toBe(50);
    expect(built.problems).toEqual({ sample_steps: "must be a whole number" });
  });
});
