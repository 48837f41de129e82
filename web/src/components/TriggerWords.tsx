import type { Lora } from "../api/types";
import type { LoraPick } from "./LoraPicker";

/** The trigger word a LoRA was trained with (its sidecar's `trigger_word`), or null. */
export function triggerWord(lora: Pick<Lora, "sidecar">): string | null {
  const word = lora.sidecar?.trigger_word;
  return typeof word === "string" && word.trim() ? word.trim() : null;
}

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/** Whether `prompt` holds `word` as a word of its own (any case; "sks" is not in "asks"). */
export function holdsWord(prompt: string, word: string): boolean {
  return new RegExp(`(^|[^\\p{L}\\p{N}_])${escape(word)}($|[^\\p{L}\\p{N}_])`, "iu").test(prompt);
}

interface Props {
  loras: readonly Lora[];
  picks: readonly LoraPick[];
  prompt: string;
  /** Put `word` in the prompt (first, as the run put it before each caption); the form's `prompt` field then has the focus. */
  onAdd: (word: string) => void;
}

/**
 * Under Generate's prompt: the trigger word of each picked LoRA that the prompt lacks, with a
 * button that adds it. A LoRA trained with a trigger word learned its subject under that word
 * (the run put it before every caption); a prompt without it shows little of the LoRA, and the
 * LoRA list alone never said which word that was.
 */
export function TriggerWords({ loras, picks, prompt, onAdd }: Props) {
  const missing: { name: string; word: string }[] = [];
  for (const name of new Set(picks.map((p) => p.name))) {
    const lora = loras.find((l) => l.name === name);
    const word = lora ? triggerWord(lora) : null;
    if (word && !holdsWord(prompt, word) && !missing.some((m) => m.word === word)) missing.push({ name, word });
  }
  if (!missing.length) return null;
  return (
    <div className="field wide muted small trigger-words" data-testid="trigger-words">
      {missing.map(({ name, word }) => (
        <span key={word}>
          {name} was trained with the trigger word <code>{word}</code>, which the prompt does not hold.{" "}
          <button
            type="button"
            className="ghost small"
            onClick={(e) => {
              // the button goes with the hint once the word is in: the focus goes to the prompt it
              // went into, not lost to the page's start (keyboard only: RELIABILITY 1545)
              const field = e.currentTarget.form?.elements.namedItem("prompt");
              onAdd(word);
              if (field instanceof HTMLElement) field.focus();
            }}
          >
            Add “{word}”
          </button>{" "}
        </span>
      ))}
    </div>
  );
}
