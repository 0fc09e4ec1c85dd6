"""Each node's docstring names every topic and service the node creates (ros2/examples' shape).

The docstring is what `ros2 run` users read first; a topic added without it is a topic nobody
finds. The behaviour behind them is in docs/nodes.md, once.
"""
import ast
from pathlib import Path

import pytest

NODES = Path(__file__).resolve().parents[1] / 'simreal_ros' / 'nodes'
CREATORS = {'create_publisher': 1, 'create_subscription': 1, 'create_service': 1,
            'PolledSubscription': 2}
SECTIONS = ('Subscribes:', 'Publishes:', 'Parameters:')


def created_names(tree):
    """Return the literal topic and service names a module creates."""
    names = set()
    for call in ast.walk(tree):
        if not isinstance(call, ast.Call):
            continue
        func = call.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, 'id', '')
        index = CREATORS.get(name)
        if index is None or len(call.args) <= index:
            continue
        arg = call.args[index]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            names.add(arg.value)
    return names


def is_part(path):
    """A part of a node split into files: `<node>_<role>.py` beside `<node>.py`."""
    return any(path.stem.startswith(other.stem + '_') for other in NODES.glob('*.py')
               if other != path and other.stem not in ('__init__', 'common'))


MODULES = sorted(p for p in NODES.glob('*.py')
                 if p.stem not in ('__init__', 'common', 'friction_id', 'inertia_id',
                                   'latency_id') and not is_part(p))


def parts_of(path):
    return sorted(NODES.glob(f'{path.stem}_*.py'))


@pytest.mark.parametrize('path', MODULES, ids=lambda p: p.stem)
def test_node_docstring_names_its_topics_services_and_parameters(path):
    tree = ast.parse(path.read_text())
    doc = ast.get_docstring(tree) or ''
    created = created_names(tree).union(*(created_names(ast.parse(part.read_text()))
                                          for part in parts_of(path)))
    missing = sorted(n for n in created if n not in doc)
    assert not missing, f'{path.name}: docstring does not name {missing}'
    assert all(s in doc for s in SECTIONS), f'{path.name}: docstring lacks one of {SECTIONS}'
    assert len(doc.splitlines()) <= 30, f'{path.name}: the why belongs in docs/nodes.md'


def test_the_names_found_are_the_ones_created():
    """The scan itself: a node that creates topics yields them (a scan finding nothing would
    pass every node)."""
    tree = ast.parse((NODES / 'policy_runner.py').read_text())
    assert {'policy/command', 'joint_states', 'cmd_vel', '~/enable'} <= created_names(tree)


def test_the_parts_of_a_split_node_are_scanned_with_it():
    """A topic created in one of a node's parts (`<node>_<role>.py`) must be named by the
    node's docstring, as if it were created in the node's own file."""
    for path in MODULES:
        for part in parts_of(path):
            assert is_part(part) and part not in MODULES
            assert 'def main(' not in part.read_text(), f'{part.name}: a part has no main'
