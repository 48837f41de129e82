import type { ReactNode } from "react";

/** One column of a DataTable: its header and how a row renders in it. */
export interface Column<T> {
  /** Header text; also the cell's data-label in a stacked table. Empty for an actions column. */
  header: string;
  /** A number column (right-aligned). */
  num?: boolean;
  /** "primary": the row's name cell (a card's title on phones); "actions": the row's buttons. Neither gets a data-label. */
  kind?: "primary" | "actions";
  cell: (row: T) => ReactNode;
}

interface Props<T> {
  rows: T[];
  columns: Column<T>[];
  rowKey: (row: T) => string;
  /** Stack the cells into one card per row on phones (each cell labelled by its header). */
  stack?: boolean;
  testId?: string;
  /** A class for a row (e.g. "unusable": greyed). */
  rowClass?: (row: T) => string | undefined;
}

function cellClass(column: Column<unknown>): string | undefined {
  if (column.kind === "primary") return "primary-cell";
  if (column.kind === "actions") return "actions";
  return column.num ? "num" : undefined;
}

/** The list tables of the Models, Runs and Datasets screens: a header row, then one row per item. */
export function DataTable<T>({ rows, columns, rowKey, stack = false, testId, rowClass }: Props<T>) {
  return (
    <div className="table-wrap card">
      <table className={stack ? "table stack" : "table"} data-testid={testId}>
        <thead>
          <tr>
            {/* an actions column has no visible header, but a screen reader names it (its cells' buttons are read under it) */}
            {columns.map((c, i) =>
              c.header ? (
                <th key={i} className={c.num ? "num" : undefined}>
                  {c.header}
                </th>
              ) : (
                <th key={i}>
                  <span className="visually-hidden">Actions</span>
                </th>
              ),
            )}
          </tr>
        </thead>
        <tbody>
          {rows.map((row) => (
            <tr key={rowKey(row)} className={rowClass?.(row)}>
              {columns.map((c, i) => (
                <td key={i} className={cellClass(c as Column<unknown>)} data-label={stack && !c.kind ? c.header : undefined}>
                  {c.cell(row)}
                </td>
              ))}
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
