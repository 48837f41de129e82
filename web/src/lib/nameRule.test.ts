import { describe, expect, it } from "vitest";
import { SERVER_RULES } from "../test/serverRules.gen";
import { nameProblem } from "./nameRule";

const rule = SERVER_RULES.dataset_name_rule;

describe("nameProblem (the served dataset_name_rule)", () => {
  it.each(SERVER_RULES.name_cases)("gives the server's verdict on %j (refused: %s)", (name, refused) => {
    expect(nameProblem(rule, name) !== null).toBe(refused);
  });

  it("takes names in any script, as the server does", () => {
    for (const name of ["café", "猫の写真", "Ελληνικά", "naïve-ß", "e\u0301te"]) expect(nameProblem(rule, name)).toBeNull();
  });

  it("takes a joiner that joins, as prompts do, and refuses one that joins nothing (RELIABILITY 1126)", () => {
    const taken = ["گل\u200cها", "👩\u200d💻 at work", "🏳️\u200d🌈", "👩🏽\u200d💻", "क्\u200dष", "🏴\u{E0067}\u{E0062}\u{E0073}\u{E0063}\u{E0074}\u{E007F}"];
    for (const name of taken) expect(nameProblem(rule, name)).toBeNull();
    for (const name of ["ca\u200dt", "گل\u200c", "\u200cها", "گ \u200cه", "گ\u200c\u200cه", "a\u{E0067}\u{E007F}"])
      expect(nameProblem(rule, name)).toMatch(/invisible or text-direction/);
  });

  it("leaves to the server a check this browser cannot compile", () => {
    const odd = { ...rule, checks: [{ refuse: "(?<=", flags: "u", reason: "never" }, ...rule.checks] };
    expect(nameProblem(odd, "cats")).toBeNull();
    expect(nameProblem(odd, "a|b")).toMatch(/must not contain any of/);
  });

  it("says the server's reason", () => {
    expect(nameProblem(rule, "日".repeat(67))).toBe(rule.bytes_reason);
    expect(nameProblem(rule, "con.txt")).toBe("'con.txt' is a reserved device name on Windows; pick another name");
    expect(nameProblem(rule, "a\u202eb")).toMatch(/invisible or text-direction/);
  });
});
