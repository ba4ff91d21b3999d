// A chart's data as CSV (RFC 4180): a header row of column names, then one row per x value.

function cell(value: string | number | null | undefined): string {
  if (value === null || value === undefined) return "";
  const text = typeof value === "number" ? (Number.isFinite(value) ? String(value) : "") : value;
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

/** Columns of equal length (uPlot's aligned data) under `headers`; empty cells where a value is null. */
export function toCsv(headers: readonly string[], columns: readonly (readonly (number | string | null)[])[]): string {
  if (headers.length !== columns.length) throw new Error("one header per column");
  const rows = columns[0]?.length ?? 0;
  const lines = [headers.map(cell).join(",")];
  for (let i = 0; i < rows; i++) lines.push(columns.map((column) => cell(column[i])).join(","));
  return lines.join("\r\n") + "\r\n";
}

/** A file name from a chart title: "Loss (run 3)" -> "loss-run-3.csv". */
export function csvFileName(title: string): string {
  const stem = title.toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-|-$/g, "");
  return `${stem || "chart"}.csv`;
}
