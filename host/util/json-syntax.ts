// Reporting a JSON syntax error in a configuration file without quoting the file.

/**
 * JSON.parse's complaint without the file's text: V8 quotes the text around a bad token
 * ('Unexpected token 'h', ..."token":hunter2..."'), and a configuration file holds tokens and
 * secrets. Says where instead: line and column, or the line when V8 gave only the quote.
 */
export function jsonSyntaxProblem(error: unknown, text: string): string {
  const message = error instanceof Error ? error.message : String(error);
  const head = message
    .replace(/, (\.\.\.)?".*$/s, '')
    .replace(/ at position \d+.*$/s, '')
    .replace(/ in JSON$/, '')
    .replace(/^Unexpected token .*$/s, 'Unexpected token');
  const at = /at position (\d+)/.exec(message);
  const where = (position: number, withColumn: boolean): string => {
    const before = text.slice(0, position);
    const line = before.split('\n').length;
    return withColumn ? `line ${line}, column ${position - before.lastIndexOf('\n')}` : `line ${line}`;
  };
  if (at?.[1] !== undefined) return `${head} at ${where(Number(at[1]), true)}`;
  const quoted = /, (?:\.\.\.)?"(.*)"(?:\.\.\.)? is not valid JSON$/s.exec(message)?.[1];
  const index = quoted === undefined || quoted === '' ? -1 : text.indexOf(quoted);
  // V8 quotes about ten characters either side of the bad token.
  return index < 0 ? head : `${head} near ${where(index + Math.floor((quoted?.length ?? 0) / 2), false)}`;
}
