"""The package against the ROS 2 distros it supports, from committed facts (no ROS needed).

test/data/distro_api.json and test/data/rosdep_keys.json are written by scripts/distro_facts.py
from the upstream sources (ros2/rclpy, ros2/launch, ros2/launch_ros, ros2/rcl, Fast DDS and
ros/rosdistro; see their `sources` fields); this test only reads them. It fails when:
- the package uses an rclpy / launch / launch_ros name, keyword argument or class member that
  Humble, Jazzy or Kilted lacks, unless the use is a listed fallback inside a `try` that
  catches its absence (FALLBACKS);
- the package takes an rclpy enum as a number (`int(param.type_)`) where a distro's enum is a
  plain Enum, not an IntEnum (Parameter.Type on Humble and Jazzy);
- a logger call site's severity is chosen at run time (`(log.warn if x else log.info)(...)`)
  on a distro whose rclpy refuses a call site whose severity changes between calls;
- the discovery set-up or the loopback transport rule misses what a distro's rcl or Fast DDS
  reads (with ROS_DISTRO unset too, as the PyPI wheels leave it), or the shared-memory check
  misses the segments a distro's Fast DDS maps;
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
        'nodes/common.make_executor: SingleThreadedExecutor on Humble (rclpy.experimental '
        'came to Jazzy with rclpy 7.1.4 or later: the 7.1.6 wheel has it)',
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


def _enum_problem(entry, rest, use):
    """Why `int(<use>)` fails on this distro's enum, or None (IntEnum, or not an enum)."""
    parts = list(rest)
    while entry is not None and entry.get('kind') == 'class':
        if entry.get('enum_base'):
            if entry['enum_base'] in ('IntEnum', 'IntFlag'):
                return None
            return (f'{use.module}.{use.name} is a plain {entry["enum_base"]}: int() raises '
                    'TypeError (take .value)')
        if not parts:
            return None
        entry = entry['nested'].get(parts.pop(0))
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
    if use.extra.get('as_int'):
        return _enum_problem(names[head], rest, use)
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


def test_an_enum_taken_as_a_number_is_caught(tmp_path):
    """Parameter.Type is an IntEnum on Kilted, a plain Enum on Humble and Jazzy: int() of it
    raised TypeError in tools/params_doc on Jazzy. Its .value is a number on all three."""
    from api_uses import scan_file
    kinds = {d: API['distros'][d]['modules']['rclpy.parameter']['Parameter']['nested']['Type']
             ['enum_base'] for d in CHECKED}
    assert kinds == {'humble': 'Enum', 'jazzy': 'Enum', 'kilted': 'IntEnum'}, kinds
    src = tmp_path / 'offender.py'
    src.write_text('import rclpy\n'
                   'from rclpy.parameter import Parameter\n'
                   'def kind(node):\n'
                   '    return int(node.get_parameter("x").type_)\n'
                   'def array():\n'
                   '    return int(Parameter.Type.DOUBLE_ARRAY)\n'
                   'def fine(param):\n'
                   '    return param.type_.value, Parameter.Type.DOUBLE_ARRAY.value\n')
    found = problems(scan_file(src, 'offender.py'))
    for line in (4, 6):
        for distro in ('humble', 'jazzy'):
            assert any(f.startswith(f'offender.py:{line}: {distro}: ') and 'plain Enum' in f
                       for f in found), (line, distro, found)
    assert not any(': kilted: ' in f or 'offender.py:8' in f for f in found), found


# -- loggers: rclpy refuses a call site whose severity changes -------------------------------

LOG_METHODS = {'debug', 'info', 'warn', 'warning', 'error', 'fatal', 'log'}


def _logger_branches(node):
    """True when `node` (an expression) contains a logger method reference like `x.info`."""
    return any(isinstance(n, ast.Attribute) and n.attr in LOG_METHODS for n in ast.walk(node))


def runtime_severity_sites(tree, rel):
    """Call sites (file:line) whose logger method is chosen at run time: a call of a
    conditional / boolean / subscript expression over logger methods, of getattr(logger,
    <not a constant>), or of a name bound to such an expression."""
    chosen = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.IfExp, ast.BoolOp)) \
                and _logger_branches(node.value):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    chosen[t.id] = node.lineno
    sites = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, (ast.IfExp, ast.BoolOp, ast.Subscript)) and _logger_branches(f):
            sites.append(node.lineno)
        elif (isinstance(f, ast.Call) and isinstance(f.func, ast.Name) and f.func.id == 'getattr'
              and len(f.args) >= 2 and not isinstance(f.args[1], ast.Constant)
              and 'log' in ast.unparse(f.args[0]).lower()):
            sites.append(node.lineno)
        elif isinstance(f, ast.Name) and f.id in chosen:
            sites.append(node.lineno)
    return [f'{rel}:{line}' for line in sorted(sites)]


def test_the_logger_rule_is_known_for_every_distro():
    """Every checked rclpy refuses a call site whose severity changes between calls
    ("Logger severity cannot be changed between calls"); a call site is identified by
    file, function, line and bytecode offset, so one expression is one site."""
    for distro in CHECKED:
        rule = API['distros'][distro]['logger']
        assert rule['severity_fixed_per_call_site'] is True, (distro, rule)
        assert rule['call_site'] and 'line_number' in rule['call_site'], (distro, rule)


def test_every_logger_call_site_has_one_severity():
    """sysid_experiment's `(log.info if ok else log.warn)(...)` killed the node on Jazzy
    ([FATAL] Exception in 'services' callback: Logger severity cannot be changed between
    calls); sim_bridge's error/info one raises on Kilted too. One call site per severity."""
    strict = [d for d in CHECKED if API['distros'][d]['logger']['severity_fixed_per_call_site']]
    found = []
    for path in package_files(REPO):
        rel = str(path.relative_to(REPO))
        found += runtime_severity_sites(ast.parse(path.read_text()), rel)
    assert not (strict and found), (f'logger call sites whose severity changes at run time '
                                    f'(rclpy of {strict} raises): write one call per '
                                    f'severity:\n' + '\n'.join(found))


def test_a_runtime_severity_is_caught():
    src = ('def f(self, ok, log):\n'
           '    (self.get_logger().info if ok else self.get_logger().warn)("x")\n'
           '    (log.error if not ok else log.info)("y")\n'
           '    getattr(log, "info" if ok else "error")("z")\n'
           '    say = log.info if ok else log.warning\n'
           '    say("w")\n'
           '    if ok:\n'
           '        log.info("fine")\n'
           '    else:\n'
           '        log.warning("fine")\n')
    assert runtime_severity_sites(ast.parse(src), 'o.py') == ['o.py:2', 'o.py:3', 'o.py:4',
                                                              'o.py:6']


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
def test_loopback_transport_rule_on_every_distro(distro, tmp_path, monkeypatch):
    """Under localhost discovery the nodes go to the loopback UDP profile, under the name the
    installed Fast DDS reads the profile file from (found from its library, whatever
    ROS_DISTRO says: the PyPI wheels leave it unset), and the localhost switch that would bring
    shared memory back is off. Each distro's library stands in a folder of its own."""
    import re
    import sys
    from simreal_ros.nodes.common import (PROFILES_VARIABLES, localhost_discovery,
                                          prefer_udp_transport)
    fastdds = API['compiled'][distro]['fastdds_profiles_variable']
    major = int(re.search(r'Fast-DDS (\d+)\.', fastdds['source']).group(1))
    prefix = tmp_path / distro
    (prefix / 'lib').mkdir(parents=True)
    library = 'libfastdds.so.3.2.2' if major >= 3 else 'libfastrtps.so.2.14.5'
    (prefix / 'lib' / library).write_bytes(b'')
    monkeypatch.setattr(sys, 'prefix', str(tmp_path / 'no_venv'))   # not this venv's library
    for env in ({'ROS_DISTRO': distro, 'AMENT_PREFIX_PATH': str(prefix)},
                {'AMENT_PREFIX_PATH': str(prefix)}):                  # ROS_DISTRO unset
        localhost_discovery(env)
        assert prefer_udp_transport(env) == 'loopback UDP'
        for name in PROFILES_VARIABLES:
            # the one this Fast DDS reads; the other would warn (Fast DDS 3) or be ignored
            assert env.get(name, '').endswith('loopback_udp.xml') == (name in fastdds['names']), (
                distro, name, env)
        assert env['ROS_AUTOMATIC_DISCOVERY_RANGE'] == 'SYSTEM_DEFAULT'
        assert 'ROS_LOCALHOST_ONLY' not in env
    # No library found (or both): both names, so that every Fast DDS reads the profile (the
    # Jazzy wheels' nodes bound UDP to 0.0.0.0 when only FASTDDS_ was set).
    env = {'ROS_AUTOMATIC_DISCOVERY_RANGE': 'LOCALHOST', 'AMENT_PREFIX_PATH': ''}
    assert prefer_udp_transport(env) == 'loopback UDP'
    for name in fastdds['names']:
        assert env.get(name, '').endswith('loopback_udp.xml'), (distro, name, 'no library')


@pytest.mark.parametrize('distro', CHECKED)
def test_shared_memory_is_seen_on_every_distro(tmp_path, monkeypatch, distro):
    """dds_transport reads the segments this distro's Fast DDS maps (SHM_MANAGER_DOMAIN:
    fastrtps_ in Fast DDS 2, fastdds_ in 3)."""
    from simreal_ros.nodes.common import dds_transport
    prefix = API['compiled'][distro]['fastdds_shm_segments']['prefix']
    assert prefix, distro
    maps = tmp_path / 'maps'
    maps.write_text(f'7f59 rw-s 00000000 00:1b 388730 {prefix}75c3aaf97c5e90ef\n')
    monkeypatch.delenv('RMW_IMPLEMENTATION', raising=False)
    assert dds_transport(maps) == 'shared memory + UDP', (distro, prefix)


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
    return [p for p in sorted(REPO.rglob('*.py'))
            if not (skip & set(p.relative_to(REPO).parts)
                    or p.relative_to(REPO).parts[0].startswith('.venv'))]   # .venv-jazzy


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
