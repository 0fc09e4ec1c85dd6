#!/usr/bin/env python3
"""Render docs/benchmarks.md from the benches' stored results (bench/results/*.json).

    .venv/bin/python scripts/benchmarks_doc.py --write    # rewrite docs/benchmarks.md
    .venv/bin/python scripts/benchmarks_doc.py --check    # exit 1 when it is out of date

bench/record.py stores each result as {"bench", "label", "command", "date", "commit",
"machine", "seconds", "result"}. Every figure of the page comes from such a file: per bench a
description (its docstring's first paragraphs), then per stored run the command, date, commit
and machine, and a table of the result's fields (nested mappings flattened to dotted names,
long lists summarised). Any bench's JSON renders; nothing is copied by hand.
"""
import argparse
import ast
import json
from pathlib import Path
import sys

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / 'bench' / 'results'
BENCHES = REPO / 'bench'
DOC = REPO / 'docs' / 'benchmarks.md'

LIST_INLINE = 8        # lists of scalars up to this length are shown whole
MAX_ROWS = 60          # fields per table; the rest are counted and left in the JSON
MAX_CELL = 240         # characters of one value


def describe(bench, benches=BENCHES):
    """Return the bench's docstring as a short description: summary line and first paragraph."""
    script = benches / f'{bench}.py'
    try:
        doc = ast.get_docstring(ast.parse(script.read_text()))
    except (OSError, SyntaxError, ValueError):
        doc = None
    if not doc:
        return f'(no bench/{bench}.py docstring found)'
    paragraphs = [p for p in doc.strip().split('\n\n') if p.strip()]
    prose = []
    for para in paragraphs[:4]:
        if para.startswith('    '):          # a usage example
            continue
        lines = []
        for line in para.splitlines():
            if line.lstrip().startswith('- '):   # a list: the page's table says the rest
                break
            lines.append(line)
        text = ' '.join(' '.join(lines).split())
        if text.endswith(':'):                # the sentence that introduced the list
            text = text[:max(text.rfind('. ', 0, len(text) - 1) + 1, 0)].strip()
        if text:
            prose.append(text)
        if len(prose) == 2:
            break
    return ' '.join(prose) if prose else ' '.join(paragraphs[0].split())


def fmt(value):
    """Format one scalar for a table cell."""
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, float):
        return f'{value:.6g}'
    if value is None:
        return '-'
    text = str(value)
    return text if len(text) <= MAX_CELL else text[:MAX_CELL - 3] + '...'


def summarise(values):
    """Summarise a list: whole when short and scalar, otherwise its size and range."""
    scalars = all(not isinstance(v, (dict, list)) for v in values)
    if scalars and len(values) <= LIST_INLINE:
        return ', '.join(fmt(v) for v in values) if values else '(empty)'
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if scalars and numbers and len(numbers) == len(values):
        return f'{len(values)} values, {fmt(min(numbers))} to {fmt(max(numbers))}'
    kind = 'entries' if not scalars else 'values'
    return f'{len(values)} {kind} (in the JSON)'


def flatten(result, prefix=''):
    """Yield (dotted name, formatted value) for every field of a result."""
    for key, value in result.items():
        name = f'{prefix}{key}'
        if isinstance(value, dict):
            if value:
                yield from flatten(value, name + '.')
            else:
                yield name, '(empty)'
        elif isinstance(value, list):
            yield name, summarise(value)
        else:
            yield name, fmt(value)


def cell(text):
    return text.replace('|', '\\|').replace('\n', ' ')


def machine_line(machine):
    if not isinstance(machine, dict):
        return fmt(machine)
    parts = []
    if machine.get('cpus'):
        parts.append(f"{machine['cpus']} CPUs")
    if machine.get('cpu_model'):
        parts.append(machine['cpu_model'])
    for key, label in (('system', ''), ('python', 'Python '), ('ros_distro', 'ROS ')):
        if machine.get(key):
            parts.append(f'{label}{machine[key]}')
    if 'load_1min_at_start' in machine:
        parts.append(f"load {fmt(machine['load_1min_at_start'])} at start")
    return ', '.join(parts)


def load(results):
    """Return the stored runs, grouped by bench, each group sorted by label."""
    runs = {}
    for path in sorted(Path(results).glob('*.json')):
        try:
            data = json.loads(path.read_text())
        except ValueError as exc:
            raise SystemExit(f'{path}: not JSON ({exc}); rerun its bench through '
                             'bench/record.py')
        if not isinstance(data, dict) or not isinstance(data.get('result'), dict):
            raise SystemExit(f'{path}: no "result" object; store results with bench/record.py')
        bench = data.get('bench') or path.stem.split('--')[0]
        runs.setdefault(bench, []).append((data.get('label') or '', path.name, data))
    return {bench: sorted(group) for bench, group in sorted(runs.items())}


def render(results=RESULTS, benches=BENCHES):
    """Return the text of docs/benchmarks.md."""
    out = ['# Benchmarks', '',
           '<!-- Generated by scripts/benchmarks_doc.py from bench/results/*.json: do not edit.',
           '     Rerun a bench with bench/record.py, then scripts/benchmarks_doc.py --write. -->',
           '',
           'Every figure in these docs comes from a bench in `bench/` run through',
           '`bench/record.py`, which keeps its JSON summary with the command, the date, the',
           'commit and the machine. Figures from a 2-core machine shared with other jobs are',
           'noisy: compare runs on your own machine, several runs each. To add or refresh one:',
           '',
           '```bash',
           '.venv/bin/python bench/record.py [--label NAME] -- bench/<bench>.py [args]',
           '.venv/bin/python scripts/benchmarks_doc.py --write',
           '```', '']
    runs = load(results)
    if not runs:
        out += ['No stored results yet.', '']
    else:
        out += ['| bench | stored runs |', '| --- | --- |']
        for bench, group in runs.items():
            labels = ', '.join(label or '(default)' for label, _, _ in group)
            out.append(f'| [{bench}](#{bench}) | {cell(labels)} |')
        out.append('')
    for bench, group in runs.items():
        out += [f'## {bench}', '', describe(bench, benches), '']
        for label, filename, data in group:
            if label:
                out += [f'### {bench}, {label}', '']
            out += [f"- command: `{data.get('command', '?')}`",
                    f"- date: {data.get('date', '?')}, commit {data.get('commit') or '?'}"
                    + (f", {fmt(data['seconds'])} s" if 'seconds' in data else ''),
                    f"- machine: {machine_line(data.get('machine', {}))}",
                    f'- stored: `bench/results/{filename}`', '',
                    '| field | value |', '| --- | --- |']
            rows = list(flatten(data['result']))
            for name, value in rows[:MAX_ROWS]:
                out.append(f'| `{cell(name)}` | {cell(value)} |')
            if len(rows) > MAX_ROWS:
                out.append(f'| ... | {len(rows) - MAX_ROWS} more fields in the JSON |')
            out.append('')
    return '\n'.join(out).rstrip('\n') + '\n'


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument('--write', action='store_true', help='rewrite the page')
    mode.add_argument('--check', action='store_true', help='exit 1 when the page is stale')
    parser.add_argument('--results', type=Path, default=RESULTS, help=argparse.SUPPRESS)
    parser.add_argument('--benches', type=Path, default=BENCHES, help=argparse.SUPPRESS)
    parser.add_argument('--out', type=Path, default=DOC, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    text = render(args.results, args.benches)
    if args.write:
        args.out.write_text(text)
        print(f'wrote {args.out}')
        return 0
    current = args.out.read_text() if args.out.exists() else ''
    if current != text:
        print(f'{args.out} is out of date with {args.results}: run '
              '.venv/bin/python scripts/benchmarks_doc.py --write and commit it',
              file=sys.stderr)
        return 1
    print(f'{args.out} is up to date')
    return 0


if __name__ == '__main__':
    sys.exit(main())
