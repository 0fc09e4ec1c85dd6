"""docs/benchmarks.md is rendered from bench/results/*.json (scripts/benchmarks_doc.py): the
committed page is what the stored results render to, and any bench's JSON renders."""
import json
from pathlib import Path
import subprocess
import sys

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / 'scripts' / 'benchmarks_doc.py'
sys.path.insert(0, str(REPO / 'scripts'))

import benchmarks_doc  # noqa: E402


def test_docs_benchmarks_md_is_up_to_date_with_the_stored_results():
    out = subprocess.run([sys.executable, str(SCRIPT), '--check'], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr


def stored(tmp_path, name, result, **info):
    data = {'bench': name.split('--')[0], 'label': name.partition('--')[2],
            'command': f'python bench/{name}.py --x 1', 'date': '2026-11-27 01:00 UTC',
            'commit': 'abc1234', 'seconds': 12.5,
            'machine': {'cpus': 2, 'cpu_model': 'Test CPU', 'python': '3.11.9',
                        'system': 'Linux 6.1', 'load_1min_at_start': 1.25,
                        'ros_distro': 'kilted (PyPI wheels)'},
            'result': result, **info}
    results = tmp_path / 'results'
    results.mkdir(exist_ok=True)
    (results / f'{name}.json').write_text(json.dumps(data))
    return results


def test_any_bench_renders_flattened_and_summarised_with_its_provenance(tmp_path):
    benches = tmp_path / 'bench'
    benches.mkdir()
    (benches / 'new_bench.py').write_text('"""Measure a new thing.\n\n    python bench/new_'
                                          'bench.py\n\nIt times the thing per call.\n"""\n')
    results = stored(tmp_path, 'new_bench', {
        'rate_hz': 499.987654321, 'passed': True, 'nested': {'a': {'b': 3}, 'c': 'x|y'},
        'short': [1, 2, 3], 'long': list(range(100)), 'runs': [{'d': 1}, {'d': 2}],
        'none': None})
    stored(tmp_path, 'new_bench--variant', {'variant_hz': 250.0})
    text = benchmarks_doc.render(results, benches)
    assert '## new_bench' in text and '### new_bench, variant' in text
    assert 'Measure a new thing. It times the thing per call.' in text
    assert '- command: `python bench/new_bench.py --x 1`' in text
    assert '2026-11-27 01:00 UTC, commit abc1234, 12.5 s' in text
    assert '2 CPUs, Test CPU, Linux 6.1, Python 3.11.9' in text and 'load 1.25' in text
    rows = dict(line.strip('|').split('|', 1) for line in text.splitlines()
                if line.startswith('| `'))
    rows = {k.strip(' `'): v.strip() for k, v in rows.items()}
    assert rows['rate_hz'] == '499.988'
    assert rows['passed'] == 'true'
    assert rows['nested.a.b'] == '3'
    assert rows['nested.c'] == 'x\\|y'
    assert rows['short'] == '1, 2, 3'
    assert rows['long'] == '100 values, 0 to 99'
    assert rows['runs'] == '2 entries (in the JSON)'
    assert rows['none'] == '-'


def test_check_fails_on_a_stale_page_and_write_fixes_it(tmp_path):
    results = stored(tmp_path, 'sim_rate', {'publish_rate_hz': 500.0})
    page = tmp_path / 'benchmarks.md'
    args = ['--results', str(results), '--benches', str(REPO / 'bench'), '--out', str(page)]
    assert benchmarks_doc.main(['--check'] + args) == 1          # missing
    assert benchmarks_doc.main(['--write'] + args) == 0
    assert benchmarks_doc.main(['--check'] + args) == 0
    stored(tmp_path, 'sim_rate', {'publish_rate_hz': 499.0})       # a new run
    assert benchmarks_doc.main(['--check'] + args) == 1
    page.write_text(page.read_text().replace('499', '498'))         # a hand edit
    assert benchmarks_doc.main(['--check'] + args) == 1


def test_a_result_file_that_is_not_a_record_is_named(tmp_path):
    results = tmp_path / 'results'
    results.mkdir()
    (results / 'broken.json').write_text('{"rate": 1}')
    try:
        benchmarks_doc.render(results, REPO / 'bench')
    except SystemExit as exc:
        assert 'broken.json' in str(exc) and 'bench/record.py' in str(exc)
    else:
        raise AssertionError('a file without "result" was rendered')
