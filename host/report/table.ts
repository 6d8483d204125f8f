// Plain-text tables for reports (SRAM experiments, benchmarks, commands): a header, aligned
// columns, numbers right-aligned.

export interface TextTable {
  readonly title: string;
  readonly columns: readonly string[];
  readonly rows: ReadonlyArray<ReadonlyArray<string | number>>;
}

function cell(value: string | number): string {
  if (typeof value === 'string') return value;
  if (Number.isInteger(value)) return String(value);
  return Math.abs(value) >= 100 ? value.toFixed(1) : Math.abs(value) >= 1 ? value.toFixed(2) : value.toFixed(4);
}

export function formatTable(table: TextTable): string {
  const body = table.rows.map((row) => row.map(cell));
  const widths = table.columns.map((name, column) => Math.max(name.length, ...body.map((row) => (row[column] ?? '').length)));
  const numeric = table.columns.map((_, column) => table.rows.every((row) => typeof row[column] === 'number'));
  const line = (values: readonly string[]) =>
    values
      .map((value, column) => (numeric[column] ? value.padStart(widths[column]!) : value.padEnd(widths[column]!)))
      .join('  ')
      .trimEnd();
  return [table.title, line(table.columns), widths.map((width) => '-'.repeat(width)).join('  '), ...body.map(line)].join('\n');
}

export function percent(rate: number, digits = 1): string {
  return `${(rate * 100).toFixed(digits)}%`;
}
