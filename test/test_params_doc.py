"""docs/configuration.md lists every parameter the nodes declare and every observation term key.

The generator (`simreal_ros.tools.params_doc`) builds each node in this process with each robot file
in config/robots/ whose model and policy are present, with discovery off: no node process is
started and no graph is joined.
"""
import pytest

from conftest import REPO
from simreal_ros.tools import params_doc
from simreal_ros.core.config import node_names_in
from simreal_ros.core.observation import TERM_KINDS, term_parameters
from simreal_ros.deploy.graph import ALL_NODES, MARKERS, POLICY, missing_files

DOC = REPO / 'docs' / 'configuration.md'
TERMS = 'policy_runner: observation terms'
REGENERATE = 'run .venv/bin/python -m simreal_ros.tools.params_doc --write docs/configuration.md'


@pytest.fixture(scope='module')
def robots():
    present = [p for p in params_doc.robot_files() if not missing_files(p)]
    assert any(p.stem == 'arm3' for p in present)   # packaged: never skipped
    return present


@pytest.fixture(scope='module')
def found(robots):
    return params_doc.collect(robots)


def tables(text):
    """Return {section title: {first cell of each table row: the row's cells}}."""
    sections, current = {}, None
    for line in text.splitlines():
        if line.startswith('### '):
            current = sections.setdefault(line[4:].strip(), {})
        elif current is not None and line.startswith('| `'):
            cells = [c.strip() for c in line.strip('|').split(' | ')]
            current[cells[0].strip('`')] = cells
    return sections


def declared(runs):
    """Return the parameters a node declares with any robot file, rclpy's own left out."""
    return {n for _, _, rows in runs for n in rows} - set(params_doc.RCLPY_PARAMETERS)


def test_every_node_is_built_with_every_robot_file_that_configures_it(found, robots):
    for name in ALL_NODES:
        # status_markers needs no section: it is built with every robot file (its limits).
        expected = [p.stem for p in robots if name in node_names_in(p) or name == MARKERS]
        assert [label for label, _, _ in found.get(name, [])] == expected, name
    assert set(found) == set(ALL_NODES) or len(robots) < len(params_doc.robot_files())
    # The G1's observation (its gait_phase, imu terms) is read from the G1 file, not arm3's.
    if any(p.stem == 'g1_12dof' for p in robots):
        g1 = dict((label, rows) for label, _, rows in found[POLICY])['g1_12dof']
        assert g1['observation.gait_phase.period_s'][1] == 0.8
        assert g1['observation.gait_phase.origin'][1] == 'clock'
        sim = dict((label, rows) for label, _, rows in found['sim_robot'])['g1_12dof']
        assert sim['hold_until_command'][1] is True


def test_the_generated_tables_list_exactly_what_each_node_declares(found):
    text = params_doc.markdown(found)
    sections = tables(text)
    for name, runs in found.items():
        assert set(sections[name]) == declared(runs), name
        labels = [label for label, _, _ in runs]
        for param, cells in sections[name].items():   # one value per robot, '-' if absent
            assert len(cells) == 4 + len(labels), cells
            for label, (_, _, rows) in zip(labels, runs):
                if param not in rows:
                    assert cells[2 + labels.index(label)] == params_doc.NOT_DECLARED
    assert 'hold_until_command' in sections['sim_robot']
    assert 'simreal_params_doc_' not in text and '/.local/share' not in text   # no temp paths


def test_every_term_key_of_every_kind_is_in_the_term_table(found):
    rows = tables(params_doc.markdown(found))[TERMS]
    for kind in TERM_KINDS:
        assert kind in rows, kind
        for key, default, _ in term_parameters('<name>', kind):
            cells = rows.get(f'observation.<name>.{key}')
            assert cells is not None, f'{kind}: key {key} missing'
            assert cells[1] == 'every kind' or f'`{kind}`' in cells[1].split(', '), cells
    for key, kind in (('period_s', 'gait_phase'), ('origin', 'gait_phase'),
                      ('default', 'velocity_command'), ('value', 'constant')):
        assert rows[f'observation.<name>.{key}'][1] == f'`{kind}`'


def test_the_committed_doc_lists_every_parameter_and_term_key(found):
    text = DOC.read_text()
    assert params_doc.MARKER in text, 'docs/configuration.md lost its generator marker'
    sections = tables(text[text.index(params_doc.MARKER):])
    for name, runs in found.items():
        absent = sorted(declared(runs) - set(sections.get(name, {})))
        assert not absent, f'docs/configuration.md: {name} lacks {absent}; {REGENERATE}'
    for kind in TERM_KINDS:
        for key, _, _ in term_parameters('<name>', kind):
            cells = sections[TERMS].get(f'observation.<name>.{key}')
            assert cells and (cells[1] == 'every kind' or f'`{kind}`' in cells[1]), \
                f'docs/configuration.md: term kind {kind} lacks key {key}; {REGENERATE}'
    for name in params_doc.RCLPY_PARAMETERS:   # said once, in the prose
        assert f'`{name}`' in text[:text.index(params_doc.MARKER)]


def test_the_generated_part_replaces_only_what_follows_the_marker():
    text = 'head\n' + params_doc.MARKER + '\nold tables\n'
    assert params_doc.replace_generated(text, params_doc.MARKER + '\nnew\n') == \
        'head\n' + params_doc.MARKER + '\nnew\n'
    with pytest.raises(ValueError, match='no generator marker'):
        params_doc.replace_generated('head only\n', 'x')


def test_the_committed_doc_is_what_the_generator_writes_values_and_all(found, robots):
    """Names alone let a stale default, robot-file value or description pass: with every
    robot file usable (as in CI) the committed tables must be the generator's, byte for byte."""
    unusable = sorted({p.stem for p in params_doc.robot_files()} - {p.stem for p in robots})
    if unusable:
        pytest.skip(f'no model or policy here for {unusable}: their columns cannot be made')
    text = DOC.read_text()
    assert params_doc.replace_generated(text, params_doc.markdown(found)) == text, \
        f'docs/configuration.md is stale (a value or description changed): {REGENERATE}'
