import { describe, expect, it } from "vitest";
import { INFO } from "../test/fixtures";
import { samplePromptEntries, showSamplePrompt } from "./samplePrompts";
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
    const built = buildConfig({ ...initialValues(flux), base_model: "m", data_dir: "d", sample_prompts: text }, flux, INFO.config_rules);
    expect(built.config.sample_prompts).toEqual(samplePromptEntries(text));
  });
});

describe("train form: one sample prompt syntax for references and own settings", () => {
  it("a JSON line may carry controls with its size/seed; each entry shows back in the shortest form that reads the same", () => {
    const entries = [
      "plain",
      { prompt: "make it blue", controls: ["control/a.png"] },
      { prompt: "a dog", controls: ["control/b.png"], width: 768, seed: 3 },
      "has || in it",
    ];
    const lines = entries.map(showSamplePrompt);
    expect(lines).toEqual([
      "plain",
      "make it blue || control/a.png",
      '{"prompt":"a dog","controls":["control/b.png"],"width":768,"seed":3}',
      '{"prompt":"has || in it"}',
    ]);
    const back = samplePromptEntries(lines.join("\n"));
    expect(back).toEqual(["plain", entries[1], entries[2], { prompt: "has || in it" }]);
    // a resolved config's nulls are left out
    expect(showSamplePrompt({ prompt: "x", controls: null, width: null, height: null, seed: null, guidance: null })).toBe("x");
  });
});
