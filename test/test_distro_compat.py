"""The package against the ROS 2 distros it supports, from committed facts (no ROS needed).

test/data/distro_api.json and test/data/rosdep_keys.json are written by scripts/distro_facts.py
from the upstream sources (ros2/rclpy, ros2/launch, ros2/launch_ros, ros2/rcl, Fast DDS and
ros/rosdistro; see their `sources` fields); this test only reads them. It fails when:
- the package uses an rclpy / launch / launch_ros name, keyword argument or class member that
  Humble, Jazzy or Kilted lacks, unless the use is a listed fallback inside a `try` that
  catches its absence (FALLBACKS);
- the discovery set-up or the loopback transport rule misses what a distro's rcl or Fast DDS
  reads;
- package.xml names a key rosdep cannot resolve on a supported distro, or setup.py requires
  something that neither package.xml nor requirements/rosdep_pip.txt installs;
- a file is not Python 3.10 (Humble's Ubuntu 22.04).
"""
import ast
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from api_uses import package_files, scan_package

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / 'test' / 'data'
API = json.loads((DATA / 'distro_api.json').read_text())
ROSDEP = json.loads((DATA / 'rosdep_keys.json').read_text())
CHECKED = ('humble', 'jazzy', 'kilted')          # API checked from sources
ROSDEP_DISTROS = ('humble', 'jazzy', 'kilted', 'lyrical', 'rolling')

# Names a supported distro lacks, used only behind a `try` that catches their absence, and
# what the package does instead (README, compatibility).
FALLBACKS = {
    ('rclpy.experimental', 'EventsExecutor'):
        'nodes/common.make_executor: SingleThreadedExecutor on Humble and Jazzy '
        '(rclpy.experimental is Kilted and later)',
}


def _walk(entry, parts):
    """Follow `parts` (attribute names) from a name's facts.

    Returns ('ok', facts) when every part exists (facts of the last one, None when it cannot
    be looked into further), ('missing', part) when one does not.
    """
    for part in parts:
        if entry is None or entry.get('kind') != 'class':
            return 'ok', None         # a value or an object of a compiled module: not checked
        if part in entry['methods']:
            entry = dict(entry['methods'][part], kind='function')
        elif part in entry['nested']:
            entry = entry['nested'][part]
        elif part in entry['attributes']:
            entry = None
        elif entry['opaque_bases']:
            return 'ok', None         # may come from a base outside the package's sources
        else:
            return 'missing', part
    return 'ok', entry


def _call_problem(entry, use):
    """Why a call with `use`'s keyword arguments fails against `entry`, or None."""
    if entry is None or not use.extra.get('call'):
        return None
    if entry.get('kind') == 'class':
        init = entry['methods'].get('__init__')
        if init is None:
            return None
        if init['var_keyword']:
            allowed = entry.get('init_kwargs_from_slots')
            if allowed is None:
                return None
            bad = [k for k in use.kwargs if k not in allowed]
            return f'no keyword {bad} (QoS-style __slots__)' if bad else None
        entry, bound = init, True
    elif entry.get('kind') == 'function':
        bound = entry['params'][:1] == ['self']
    else:
        return None
    params = entry['params'][1:] if bound else entry['params']
    if not entry['var_keyword']:
        bad = [k for k in use.kwargs if k not in params]
        if bad:
            return f'no keyword argument {bad}'
    positional = entry['positional'] - (1 if bound else 0)
    if not entry['var_positional'] and use.extra.get('positional', 0) > positional:
        return f'{use.extra["positional"]} positional arguments, takes at most {positional}'
    return None


def check_use(use, distro):
    """None when `distro` has what `use` needs, else the reason."""
    modules = API['distros'][distro]['modules']
    if use.module not in modules:
        return f'{use.module} is not in test/data/distro_api.json: run scripts/distro_facts.py'
    names = modules[use.module]
    if names is None:
        return f'no module {use.module}'
    if not use.name:
        return None
    head, *rest = use.name.split('.')
    if head not in names:
        return f'{use.module}.{head} is not in test/data/distro_api.json: run ' \
               'scripts/distro_facts.py'
    if names[head] is None:
        return f'no {use.module}.{head}'
    state, found = _walk(names[head], rest)
    if state == 'missing':
        return f'no {use.module}.{use.name} ({found} missing)'
    problem = _call_problem(found if rest else names[head], use)
    return f'{use.module}.{use.name}: {problem}' if problem else None


def _known_somewhere(use):
    """A method found by its receiver's name (`node.x()`, `executor.x()`) that no distro's class
    has is not a call on that class (a variable of another kind with that name)."""
    if not use.extra.get('by_receiver_name'):
        return True
    cls, method = use.name.split('.')[:2]
    return any(method in (API['distros'][d]['modules'][use.module][cls] or {}).get('methods', {})
               for d in CHECKED)


def problems(uses):
    out = []
    for use in uses:
        if not _known_somewhere(use):
            continue
        for distro in CHECKED:
            why = check_use(use, distro)
            if why is None:
                continue
            if (use.module, use.name.split('.')[0]) in FALLBACKS and use.guarded:
                continue
            extra = ' (a listed fallback, but not inside a try that catches its absence)' \
                if (use.module, use.name.split('.')[0]) in FALLBACKS else ''
            out.append(f'{use.where}: {distro}: {why}{extra}')
    return out


USES = scan_package(REPO)


def test_the_scan_sees_the_package():
    names = {(u.module, u.name) for u in USES}
    # The scan must see the uses the table is about, or the check below checks nothing.
    assert ('rclpy.qos', 'QoSProfile') in names
    assert ('rclpy.node', 'Node.create_timer') in names
    assert ('launch_ros.actions', 'Node') in names
    assert ('rclpy.executors', 'SingleThreadedExecutor.spin_once') in names
    assert len(USES) > 300


def test_every_api_use_exists_on_every_supported_distro():
    found = problems(USES)
    assert not found, ('the package uses what a supported distro lacks (fix it, or fall back '
                       'inside a try and list it in FALLBACKS):\n' + '\n'.join(found))


def test_an_api_a_distro_lacks_is_caught(tmp_path):
    """The check itself: uses Humble or Jazzy lacks, written as the package would, fail."""
    from api_uses import scan_file
    src = tmp_path / 'offender.py'
    src.write_text(
        'import rclpy\n'
        'from rclpy.parameter_client import AsyncParameterClient\n'
        'from rclpy.node import Node\n'
        'from rclpy.qos import QoSProfile, ReliabilityPolicy\n'
        'class N(Node):\n'
        '    def __init__(self):\n'
        '        super().__init__("n")\n'
        '        self.create_timer(0.1, print, autostart=False)\n'
        '        QoSProfile(depth=1, no_such_policy=2)\n'
        '        ReliabilityPolicy.BEST_AVAILABLE\n'
        'try:\n'
        '    from rclpy.experimental import EventsExecutor\n'
        'except RuntimeError:\n'
        '    pass\n')
    found = problems(scan_file(src, 'offender.py'))
    text = '\n'.join(found)
    assert 'humble: no module rclpy.parameter_client' in text
    assert 'humble: rclpy.node.Node.create_timer: no keyword argument [\'autostart\']' in text
    assert "no keyword ['no_such_policy']" in text
    assert 'humble: no rclpy.qos.ReliabilityPolicy.BEST_AVAILABLE' in text
    assert 'not inside a try that catches its absence' in text


def test_every_fallback_is_needed_and_guarded():
    for (module, name), why in FALLBACKS.items():
        uses = [u for u in USES if u.module == module and u.name.split('.')[0] == name]
        assert uses, f'{module}.{name} is listed in FALLBACKS but no longer used: remove it'
        assert all(u.guarded for u in uses), f'{module}.{name}: every use must be guarded'
        lacking = [d for d in CHECKED if check_use(uses[0], d)]
        assert lacking, f'{module}.{name}: every supported distro has it; drop the fallback'


def _subscription_call_arities():
    tree = ast.parse((REPO / 'simreal_ros' / 'nodes' / 'common.py').read_text())
    return {len(n.args) for n in ast.walk(tree) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute) and n.func.attr == 'Subscription'
            and isinstance(n.func.value, ast.Name) and n.func.value.id == '_rclpy'}


def test_polled_subscription_calls_every_distros_constructor():
    """PolledSubscription builds rclpy's C subscription directly; its argument count changed
    (content-filter options, Kilted's rclpy): both forms are tried."""
    needed = {API['compiled'][d]['rclpy_implementation.Subscription']['arguments']
              for d in CHECKED}
    assert None not in needed
    assert needed <= _subscription_call_arities(), needed


def test_localhost_discovery_on_every_distro():
    """Humble's rcl reads only ROS_LOCALHOST_ONLY; later ones ROS_AUTOMATIC_DISCOVERY_RANGE
    (Jazzy also ROS_LOCALHOST_ONLY, deprecated, and it prevails; Kilted no longer)."""
    from simreal_ros.nodes.common import localhost_discovery
    for distro in CHECKED:
        facts = API['compiled'][distro]['discovery']
        env = {'ROS_DISTRO': distro}
        localhost_discovery(env)
        if facts['ROS_AUTOMATIC_DISCOVERY_RANGE']:
            assert env['ROS_AUTOMATIC_DISCOVERY_RANGE'] == 'LOCALHOST', distro
        if not facts['ROS_AUTOMATIC_DISCOVERY_RANGE']:
            assert env.get('ROS_LOCALHOST_ONLY') == '1', distro
        elif facts['ROS_LOCALHOST_ONLY']:
            # It would prevail (and warn in every process): left unset where the range works.
            assert 'ROS_LOCALHOST_ONLY' not in env, distro
    # Without ROS_DISTRO (the PyPI wheels, Kilted) the range alone.
    env = {}
    localhost_discovery(env)
    assert env == {'ROS_AUTOMATIC_DISCOVERY_RANGE': 'LOCALHOST'}
    # The demo and the benches keep a wider discovery the user chose, but complete a LOCALHOST
    # (the Makefile exports it) with Humble's variable.
    env = {'ROS_AUTOMATIC_DISCOVERY_RANGE': 'LOCALHOST', 'ROS_DISTRO': 'humble'}
    assert localhost_discovery(env, keep_choice=True)['ROS_LOCALHOST_ONLY'] == '1'
    for chosen in ({'ROS_AUTOMATIC_DISCOVERY_RANGE': 'SUBNET', 'ROS_DISTRO': 'jazzy'},
                   {'ROS_LOCALHOST_ONLY': '0', 'ROS_DISTRO': 'humble'}):
        assert localhost_discovery(dict(chosen), keep_choice=True) == chosen


@pytest.mark.parametrize('distro', CHECKED)
def test_loopback_transport_rule_on_every_distro(distro):
    """Under localhost discovery, whichever variable a distro uses, the nodes go to the loopback
    UDP profile, under every name that distro's Fast DDS reads the profile file from, and the
    localhost switch that would bring shared memory back is off."""
    from simreal_ros.nodes.common import localhost_discovery, prefer_udp_transport
    env = {'ROS_DISTRO': distro}
    localhost_discovery(env)
    assert prefer_udp_transport(env) == 'loopback UDP'
    fastdds = API['compiled'][distro]['fastdds_profiles_variable']
    for name in fastdds['names']:
        assert env.get(name, '').endswith('loopback_udp.xml'), (distro, name)
    assert env['ROS_AUTOMATIC_DISCOVERY_RANGE'] == 'SYSTEM_DEFAULT'
    assert 'ROS_LOCALHOST_ONLY' not in env


# -- package.xml, setup.py, rosdep ------------------------------------------------------------

PACKAGE = ET.parse(REPO / 'package.xml').getroot()
PIP_FILE = REPO / 'requirements' / 'rosdep_pip.txt'
# setup.py distribution -> the rosdep key that installs it from the distro's apt.
APT_KEYS = {'numpy': 'python3-numpy', 'scipy': 'python3-scipy', 'pyyaml': 'python3-yaml',
            'setuptools': 'python3-setuptools', 'pytest': 'python3-pytest',
            'hypothesis': 'python3-hypothesis'}


def _keys(*tags):
    return [e.text.strip() for e in PACKAGE if e.tag in tags]


def _dist_name(req):
    return re.split(r'[\[<>=!~; ]', req.strip(), maxsplit=1)[0].lower().replace('_', '-')


def _setup_requires():
    tree = ast.parse((REPO / 'setup.py').read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == 'install_requires':
            return [_dist_name(ast.literal_eval(e)) for e in node.value.elts]
    raise AssertionError('setup.py: no install_requires')


def _pip_file():
    lines = [ln.split('#')[0].strip() for ln in PIP_FILE.read_text().splitlines()]
    return [_dist_name(ln) for ln in lines if ln]


def test_supported_distros_are_alive_and_foxy_is_not():
    status = ROSDEP['distribution_status']
    assert status['foxy'] == 'end-of-life'
    assert all(status[d] in ('active', 'rolling') for d in ROSDEP_DISTROS), status


@pytest.mark.parametrize('distro', ROSDEP_DISTROS)
def test_every_package_xml_key_resolves(distro):
    keys = _keys('depend', 'exec_depend', 'build_depend', 'test_depend')
    missing = [k for k in keys if k not in ROSDEP['keys']]
    assert not missing, f'{missing} not in test/data/rosdep_keys.json: run scripts/distro_facts.py'
    unresolved = [k for k in keys if ROSDEP['keys'][k][distro] is None]
    assert not unresolved, (f'package.xml: rosdep has no rule for {unresolved} on {distro} '
                            f'(Ubuntu {ROSDEP["ubuntu"][distro]}); use a key from rosdistro '
                            'or requirements/rosdep_pip.txt')


def test_setup_requires_are_installed_the_ros_way():
    """Every install_requires entry: an apt key, a pip key in package.xml, or the pip file."""
    keys = _keys('exec_depend', 'depend')
    by_pip = {}
    for k in keys:
        for d in ROSDEP_DISTROS:
            rule = ROSDEP['keys'][k][d] or {}
            for name in rule.get('pip', []):
                by_pip.setdefault(_dist_name(name), set()).add(d)
    pip_file = _pip_file()
    uncovered = []
    for dist in _setup_requires():
        if APT_KEYS.get(dist) in keys or set(ROSDEP_DISTROS) <= by_pip.get(dist, set()):
            continue
        if dist in pip_file:
            continue
        uncovered.append(dist)
    assert not uncovered, (f'setup.py requires {uncovered}, which neither a package.xml key nor '
                           'requirements/rosdep_pip.txt installs')


def test_pip_file_holds_only_what_rosdep_cannot_install():
    requires = set(_setup_requires()) | {'onnx', 'pytest-timeout', 'mujoco'}
    for dist in _pip_file():
        assert dist in requires, f'requirements/rosdep_pip.txt: {dist} is not a dependency'
        for key in (f'python3-{dist}', f'python3-{dist}-pip', dist):
            rule = ROSDEP['keys'].get(key)
            if rule and all(rule[d] for d in ROSDEP_DISTROS) and dist != 'mujoco':
                pytest.fail(f'{dist}: rosdep key {key} exists; name it in package.xml instead')


def test_imported_ros_packages_are_exec_depends():
    keys = set(_keys('exec_depend', 'depend'))
    ros_like = re.compile(r'.*(_msgs|_srvs|_interfaces)$|^(rclpy|launch|launch_ros|'
                          r'ament_index_python)$')
    missing = set()
    for path in package_files(REPO):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split('.')[0]
                if ros_like.match(top) and top not in keys:
                    missing.add(f'{top} ({path.relative_to(REPO)})')
    assert not missing, f'imported but not in package.xml: {sorted(missing)}'


# -- Python 3.10 --------------------------------------------------------------------------------

NEWER_NAMES = {'tomllib': '3.11', 'ExceptionGroup': '3.11', 'BaseExceptionGroup': '3.11',
               'TaskGroup': '3.11', 'StrEnum': '3.11', 'Self': '3.11', 'LiteralString': '3.11',
               'assert_never': '3.11', 'reveal_type': '3.11', 'TypeVarTuple': '3.11',
               'Never': '3.11', 'file_digest': '3.11', 'UTC': '3.11', 'batched': '3.12',
               'override': '3.12'}


def _python_files():
    skip = {'.venv', '.git', 'build', 'install', 'log', '__pycache__'}
    return [p for p in sorted(REPO.rglob('*.py')) if not skip & set(p.relative_to(REPO).parts)]


def test_every_file_is_python_3_10():
    """Humble (Ubuntu 22.04) runs Python 3.10: its grammar, and no 3.11+ standard library."""
    bad = []
    for path in _python_files():
        rel = path.relative_to(REPO)
        try:
            tree = ast.parse(path.read_text(), filename=str(rel), feature_version=(3, 10))
        except SyntaxError as exc:
            bad.append(f'{rel}:{exc.lineno}: {exc.msg}')
            continue
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ''] + [a.name for a in node.names]
            elif isinstance(node, ast.Attribute):
                names = [node.attr] if node.attr in ('UTC', 'TaskGroup', 'StrEnum',
                                                     'file_digest', 'batched') else []
            elif isinstance(node, ast.Name) and node.id in ('ExceptionGroup',
                                                            'BaseExceptionGroup'):
                names = [node.id]
            for name in names:
                if name in NEWER_NAMES:
                    bad.append(f'{rel}:{node.lineno}: {name} is Python {NEWER_NAMES[name]}')
    assert len(_python_files()) > 100
    assert not bad, 'not Python 3.10:\n' + '\n'.join(bad)
