import type { NameRule } from "../api/types";

/** Why the server would refuse `name` for a new dataset (data/paths.new_name), by the rule
 * /api/info serves (dataset_name_rule: data/name_rule.py), or null when it takes it. The name
 * is NFC-normalised first, as the server does; `{name}` in a reason is the name in quotes. */
export function nameProblem(rule: NameRule, name: string): string | null {
  const n = name.normalize("NFC");
  for (const check of rule.checks) {
    const pattern = compiled(check.refuse, check.flags);
    if (pattern?.test(n)) return check.reason.replace("{name}", `'${n}'`);
  }
  return new TextEncoder().encode(n).length > rule.max_bytes ? rule.bytes_reason : null;
}

/** The check's regex, or null where this browser cannot compile it (the joiner check's
 * lookbehinds: Safari before 16.4): the server's refusal then says why, as it says every reason. */
function compiled(source: string, flags: string): RegExp | null {
  try {
    return new RegExp(source, flags);
  } catch {
    return null;
  }
}
