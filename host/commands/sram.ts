// `kbtp sram <experiment>`: runs one of the SRAM cache model's experiments, prints its table
// (or one JSON object with --json) and writes its SVG chart(s) to --out.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { ParseArgsConfig } from 'node:util';
import type { Command } from '../cli.ts';
import { parseCommandLine } from './command-line.ts';
import { DEFAULT_SRAM_CONFIG, SramConfigError, loadSramConfig, withOverrides, type SramModelConfig } from '../sram/config.ts';
import { EXPERIMENTS, experimentByName } from '../sram/experiments/index.ts';
import { Progress, UsageError, integerOption, type Experiment, type OptionValues } from '../sram/experiments/experiment.ts';
import { formatTable } from '../report/table.ts';

const DEFAULT_OUT = 'sram-out';

const COMMON_OPTIONS = {
  out: { type: 'string', value: '<dir>', help: `folder for the SVG chart(s), created if missing (default ./${DEFAULT_OUT})` },
  json: { type: 'boolean', help: 'print the figures as one JSON object instead of tables' },
  config: { type: 'string', value: '<file>', help: 'SRAM model config (JSON: lines, associativity, policy, partition, costs)' },
  lines: { type: 'string', value: '<n>', help: `SRAM lines, overriding the config (default ${DEFAULT_SRAM_CONFIG.lines})` },
  seed: { type: 'string', value: '<n>', help: 'seed of the random access streams (default 1)' },
  quiet: { type: 'boolean', help: 'no progress lines on stderr' },
  help: { type: 'boolean', help: 'show this help (also -h)' },
} as const;

function topUsage(): string {
  return [
    'usage: kbtp sram <experiment> [--out dir] [--json] [options]',
    '',
    "Experiments on the model of an RDMA NIC's shared on-chip SRAM cache (docs/SRAM.md):",
    ...EXPERIMENTS.map((experiment) => `  ${experiment.name.padEnd(22)} ${experiment.summary}`),
    '',
    "Run 'kbtp sram <experiment> --help' for its options.",
  ].join('\n');
}

function optionLines(options: Readonly<Record<string, { value?: string; help: string }>>): string[] {
  return Object.entries(options).map(([name, spec]) => `  --${`${name}${spec.value ? ` ${spec.value}` : ''}`.padEnd(24)} ${spec.help}`);
}

function experimentUsage(experiment: Experiment): string {
  return [
    `usage: kbtp sram ${experiment.name} [options]`,
    '',
    experiment.summary,
    '',
    experiment.description,
    '',
    'options:',
    ...optionLines(experiment.options),
    ...optionLines(COMMON_OPTIONS),
  ].join('\n');
}

function modelConfig(values: OptionValues): SramModelConfig {
  const base = typeof values.config === 'string' ? loadSramConfig(values.config) : DEFAULT_SRAM_CONFIG;
  if (values.lines === undefined) return base;
  const lines = integerOption(values, 'lines', base.lines, 1, 1 << 24);
  return withOverrides(base, { lines }, '--lines');
}

export const command: Command = {
  summary: 'SRAM cache model experiments: dereg, qp-sweep, policies, kbtp-vs-per-block-mr, block-tier',
  async run(argv: string[]): Promise<number> {
    const [name, ...rest] = argv;
    if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
      console.log(topUsage());
      return name === undefined ? 2 : 0;
    }
    const experiment = experimentByName(name);
    if (experiment === undefined) {
      console.error(`kbtp sram: unknown experiment '${name}'\n\n${topUsage()}`);
      return 2;
    }
    const options: ParseArgsConfig['options'] = {};
    for (const [option, spec] of Object.entries({ ...experiment.options, ...COMMON_OPTIONS })) options[option] = { type: spec.type };
    const parsed = parseCommandLine(`kbtp sram ${name}`, experimentUsage(experiment), rest, options);
    if (typeof parsed === 'number') return parsed;
    const values = parsed.values as OptionValues;
    try {
      const config = modelConfig(values);
      const seed = integerOption(values, 'seed', 1, 0, 0xffffffff);
      const out = resolve(typeof values.out === 'string' ? values.out : DEFAULT_OUT);
      const progress = new Progress(name, values.quiet !== true);
      const output = experiment.run(values, { config, seed, progress });
      mkdirSync(out, { recursive: true });
      const written: string[] = [];
      for (const chart of output.charts) {
        const path = join(out, chart.file);
        writeFileSync(path, chart.svg);
        written.push(path);
      }
      if (values.json === true) {
        console.log(JSON.stringify(output.json));
      } else {
        console.log(output.tables.map(formatTable).join('\n\n'));
        if (output.notes.length > 0) console.log(`\n${output.notes.join('\n')}`);
        console.log(`\nchart${written.length === 1 ? '' : 's'}: ${written.join(', ')}`);
      }
      return 0;
    } catch (error) {
      if (error instanceof UsageError || error instanceof SramConfigError) {
        console.error(`kbtp sram ${name}: ${error.message}`);
        return 2;
      }
      throw error;
    }
  },
};
