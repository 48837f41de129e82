/** The lists a name filter is offered above: shorter ones are read at a glance. */
export const FILTER_FROM = 8;

/** Whether `name` holds every word of `query` (any case, NFC: a name typed on macOS matches). */
export function matchesName(name: string, query: string): boolean {
  const have = name.normalize("NFC").toLocaleLowerCase();
  return query
    .normalize("NFC")
    .toLocaleLowerCase()
    .split(/\s+/)
    .filter(Boolean)
    .every((word) => have.includes(word));
}

interface Props {
  value: string;
  onChange: (query: string) => void;
  /** What the list holds, for the input's name and placeholder ("datasets", "runs"). */
  what: string;
}

/** A search box that narrows a long list by name (the list's screen filters its rows with
 * matchesName); Escape clears it. */
export function NameFilter({ value, onChange, what }: Props) {
  return (
    <input
      type="search"
      className="name-filter"
      value={value}
      placeholder={`Find ${what} by name`}
      aria-label={`find ${what} by name`}
      onChange={(e) => onChange(e.target.value)}
      onKeyDown={(e) => {
        if (e.key === "Escape" && value) {
          e.preventDefault();
          onChange("");
        }
      }}
    />
  );
}
