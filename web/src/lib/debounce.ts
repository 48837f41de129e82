import { useEffect, useState } from "react";

/** `value` once it has stayed the same for `delayMs`: a search asked of the server when the typing
 * pauses, not at every keystroke. */
export function useDebounced<T>(value: T, delayMs: number): T {
  const [settled, setSettled] = useState(value);
  useEffect(() => {
    if (Object.is(value, settled)) return;
    const timer = setTimeout(() => setSettled(value), delayMs);
    return () => clearTimeout(timer);
  }, [value, settled, delayMs]);
  return settled;
}
