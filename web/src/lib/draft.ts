/**
 * A form's draft: what the user typed on a screen (Train, Generate), kept in this tab's
 * sessionStorage so that leaving the screen (another tab of the app, Back, a reload) does not
 * lose it. Per browser tab (two tabs keep two drafts); gone with the tab. Storage that is full,
 * blocked or holds something unreadable is treated as no draft: a draft is a convenience, never
 * an error.
 */
import { useEffect } from "react";

const PREFIX = "lorastudio.draft.";

/** The draft saved under `key`, or null (none, unreadable, not an object). */
export function loadDraft<T extends object>(key: string): Partial<T> | null {
  try {
    const raw = window.sessionStorage.getItem(PREFIX + key);
    if (!raw) return null;
    const value: unknown = JSON.parse(raw);
    return value && typeof value === "object" && !Array.isArray(value) ? (value as Partial<T>) : null;
  } catch {
    return null; // storage blocked, or not JSON
  }
}

/** Save `value` as the draft under `key` (silently nothing when storage is full or blocked). */
export function saveDraft(key: string, value: object): void {
  try {
    window.sessionStorage.setItem(PREFIX + key, JSON.stringify(value));
  } catch {
    // quota or blocked storage: the form still works, only its draft is not kept
  }
}

/** Forget the draft under `key` (its values were used: a run started from them). */
export function clearDraft(key: string): void {
  try {
    window.sessionStorage.removeItem(PREFIX + key);
  } catch {
    // blocked storage: nothing was kept
  }
}

/** Save `value` as the draft under `key` whenever it changes (nothing while it is null: the form
 * is not filled yet). `value` must be serialisable (JSON). */
export function useDraft(key: string, value: object | null): void {
  const text = value == null ? null : JSON.stringify(value);
  useEffect(() => {
    if (text == null) return;
    try {
      window.sessionStorage.setItem(PREFIX + key, text);
    } catch {
      // quota or blocked storage
    }
  }, [key, text]);
}
