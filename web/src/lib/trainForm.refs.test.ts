import { describe, expect, it } from "vitest";
import { INFO } from "../test/fixtures";
import { samplePromptEntries } from "./samplePrompts";
import { buildConfig, initialValues } from "./trainForm";

describe("train form: sample prompts with reference images", () => {
  it("reads 'prompt || ref, ref' lines as {prompt, controls}, '||' alone as none, others as prompts", () => {
    const text = "make it blue || control/a.png, control_2/a.png\n  plain prompt \nno refs ||\n";
    expect(samplePromptEntries(text)).toEqual([
      { prompt: "make it blue", controls: ["control/a.png", "control_2/a.png"] },
      "plain prompt",
      { prompt: "no refs", controls: [] },
    ]);
    const flux = INFO.families[1];
    const built = buildConfig({ ...initialValues(flux), base_model: "m", data_dir: "d", sample_prompts: text }, flux);
    expect(built.config.sample_prompts).toEqual(samplePromptEntries(text));
  });
});
