import { describe, expect, it } from "vitest";
import { INFO } from "../test/fixtures";
import { buildEntries, emptyRow, entriesValue, parseRows } from "./datasetEntries";
import { buildPreservation, parsePreservation, preservationFromConfig, preservationValue } from "./preservation";
import { buildConfig, initialValues, valuesFromConfig } from "./trainForm";

const flux = INFO.families.find((f) => f.name === "flux")!;
const base = { ...initialValues(flux), base_model: "m", data_dir: "d" };

describe("regularisation and output preservation in the Train form", () => {
  it("a folder marked reg sends regularisation = true and round-trips", () => {
    const rows = [emptyRow("subject"), { ...emptyRow("class"), regularisation: true }];
    expect(buildEntries(rows)).toEqual([{ path: "subject" }, { path: "class", regularisation: true }]);
    const entries = [{ path: "subject", loss_weight: 1 }, { path: "class", regularisation: true, loss_weight: 1 }];
    expect(buildEntries(parseRows(entriesValue(entries)))).toEqual([{ path: "subject" }, { path: "class", regularisation: true }]);
    const prior = [{ path: "class", regularisation: true, prior_prediction: true, loss_weight: 1 }];
    expect(buildEntries(parseRows(entriesValue(prior)))).toEqual([{ path: "class", regularisation: true, prior_prediction: true }]);
    expect(buildEntries([{ ...emptyRow("x"), prior_prediction: true }])).toEqual([{ path: "x" }]); // only with reg
  });

  it("prior_loss_weight is a number of the form", () => {
    expect(buildConfig({ ...base, prior_loss_weight: "0.5" }, flux, INFO.config_rules).config.prior_loss_weight).toBe(0.5);
    expect(buildConfig({ ...base, prior_loss_weight: "x" }, flux, INFO.config_rules).problems.prior_loss_weight).toBe("must be a number");
  });

  it("preservation: off when blank, the class word turns it on, weight and prompts parsed", () => {
    expect(buildConfig(base, flux, INFO.config_rules).config.preservation).toBeUndefined();
    const on = preservationValue({ class_word: " person ", weight: "0.5", prompts: "a person\n\n a man " });
    expect(buildConfig({ ...base, preservation: on }, flux, INFO.config_rules).config.preservation).toEqual({
      class_word: "person",
      weight: 0.5,
      prompts: ["a person", "a man"],
    });
    const noClass = preservationValue({ class_word: "", weight: "2", prompts: "" });
    expect(buildConfig({ ...base, preservation: noClass }, flux, INFO.config_rules).problems.preservation).toBe("set the class word (it turns preservation on)");
    expect(buildPreservation({ class_word: "person", weight: "x", prompts: "" })).toBe("weight must be a number");
  });

  it("a run's preservation round-trips through a clone of its config", () => {
    const config = { preservation: { class_word: "person", weight: 1, prompts: null } };
    const values = valuesFromConfig(flux, config);
    expect(parsePreservation(values.preservation)).toEqual({ class_word: "person", weight: "", prompts: "" });
    expect(buildConfig({ ...values, base_model: "m", data_dir: "d" }, flux, INFO.config_rules).config.preservation).toEqual({ class_word: "person" });
    expect(preservationFromConfig(null)).toBe("");
  });
});
