#!/usr/bin/env python3
"""Write the per-distro facts that test/test_distro_compat.py checks the package against.

    .venv/bin/python scripts/distro_facts.py --mirrors /work/.mirror \
        [--kilted-site .venv/lib/python3.11/site-packages] \
        [--jazzy-site .venv-jazzy/lib/python3.11/site-packages]

Reads the upstream sources, never imports them (except the Kilted and Jazzy rclpy wheels
installed here, each in a Python of its own venv, for the one fact that only their compiled
extension holds), and writes two tables:

- test/data/distro_api.json: for every rclpy / launch / launch_ros module the package imports
  from (test/api_uses.py finds them), per distro, the names the module defines and, for
  classes and functions, their parameters and members (and, for enums, whether they are an
  Enum or an IntEnum). Sources: the distro branches of ros2/rclpy, ros2/launch,
  ros2/launch_ros (git mirrors: `git show <branch>:<path>`); Kilted's and Jazzy's rclpy from
  the installed ros-rclpy wheels (make setup, make setup DISTRO=jazzy: the mirror's snapshot
  predates the kilted branch, and its jazzy branch stops at rclpy 7.1.3, 2024-12, before
  the EventsExecutor came to Jazzy), Kilted's launch / launch_ros from the mirror's rolling
  branch at the versions of the wheels run here. Also the discovery environment variables
  each distro's rcl reads, the profiles variable its Fast DDS reads, and its rclpy's logger
  rule (a call site's severity may not change between calls).
- test/data/rosdep_keys.json: for every key package.xml names (and the candidates looked up
  for the pip-only dependencies), per distro, what rosdep resolves it to on the distro's Ubuntu
  (ros/rosdistro: <distro>/distribution.yaml, rosdep/base.yaml, rosdep/python.yaml), or null.

The test does not need this script (nor the mirrors); it needs the committed tables. No upstream
code is written, only names, parameter names and versions.
"""
import argparse
import ast
import datetime
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / 'test'))
from api_uses import scan_package  # noqa: E402

DISTROS = ('humble', 'jazzy', 'kilted', 'lyrical', 'rolling')
UBUNTU = {'humble': 'jammy', 'jazzy': 'noble', 'kilted': 'noble', 'lyrical': 'resolute',
          'rolling': 'resolute'}
# Where each package's Python sources sit inside its repository.
PY_ROOTS = {'rclpy': ('ros2+rclpy', 'rclpy/'), 'launch': ('ros2+launch', 'launch/'),
            'launch_ros': ('ros2+launch_ros', 'launch_ros/')}
# Names recorded besides the package's own uses: the ones the package stopped using or only
# uses behind a fallback, so that the test's own check of the checker has facts to fail on.
EXTRA_NAMES = {'rclpy.parameter_client': {'AsyncParameterClient'},
               'rclpy.experimental': {'EventsExecutor'}}
ENUM_BASES = ('Enum', 'IntEnum', 'Flag', 'IntFlag')
# Keys looked up besides package.xml's, to record which pip-only dependencies have none.
CANDIDATE_KEYS = ('python3-onnx', 'python3-onnx-pip', 'python3-cma', 'python3-cma-pip',
                  'python3-mcap', 'python3-mcap-pip', 'python3-mcap-ros2-support-pip',
                  'python3-cyclonedds', 'python3-cyclonedds-pip', 'python3-mujoco',
                  'python3-onnxruntime')


class GitTree:
    """Files of one branch of a git mirror."""

    def __init__(self, git_dir, branch, prefix):
        self.git_dir, self.branch, self.prefix = str(git_dir), branch, prefix
        out = self._git('ls-tree', '-r', '--name-only', branch, prefix)
        self.files = set(out.splitlines())
        self.commit = self._git('rev-parse', branch).strip()
        self.date = self._git('log', '-1', '--format=%cs', branch).strip()

    def _git(self, *args):
        return subprocess.run(['git', '--git-dir', self.git_dir, *args], check=True,
                              capture_output=True, text=True).stdout

    def read(self, rel):
        path = self.prefix + rel
        return self._git('show', f'{self.branch}:{path}') if path in self.files else None

    def describe(self):
        return f'{Path(self.git_dir).parent.name} {self.branch} {self.commit[:12]} ({self.date})'


class DirTree:
    """Files of an installed package (site-packages)."""

    def __init__(self, root, label):
        self.root, self.label = Path(root), label

    def read(self, rel):
        path = self.root / rel
        return path.read_text() if path.is_file() else None

    def describe(self):
        return self.label


def _params(fn):
    a = fn.args
    names = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
    return {'params': names, 'positional': len(a.posonlyargs + a.args),
            'var_positional': a.vararg is not None, 'var_keyword': a.kwarg is not None}


def _module_file(tree, module):
    rel = module.split('.', 1)[1].replace('.', '/') if '.' in module else ''
    for cand in ((rel + '.py') if rel else None, (rel + '/__init__.py') if rel else '__init__.py'):
        if cand and tree.read(cand) is not None:
            return cand
    return None


class Extractor:
    """Names per module of one package in one distro, imports within the package resolved."""

    def __init__(self, root, tree):
        self.root, self.tree = root, tree
        self.cache = {}

    def module(self, module):
        if module in self.cache:
            return self.cache[module]
        self.cache[module] = None          # cycles
        rel = _module_file(self.tree, module)
        if rel is None:
            return None
        body = ast.parse(self.tree.read(rel)).body
        is_pkg = rel.endswith('__init__.py')
        names = {}
        self._collect(module, is_pkg, body, names, conditional=False)
        self.cache[module] = names
        return names

    def _abs(self, module, is_pkg, level, target):
        if level == 0:
            return target
        parts = module.split('.')
        base = parts if is_pkg else parts[:-1]
        base = base[:len(base) - (level - 1)]
        return '.'.join(base + ([target] if target else []))

    def _collect(self, module, is_pkg, body, names, conditional):
        for stmt in body:
            if isinstance(stmt, (ast.If, ast.Try)):
                parts = stmt.body + getattr(stmt, 'orelse', []) + getattr(stmt, 'finalbody', [])
                for h in getattr(stmt, 'handlers', []):
                    parts += h.body
                self._collect(module, is_pkg, parts, names, conditional=True)
            elif isinstance(stmt, ast.ClassDef):
                names[stmt.name] = self._class(module, is_pkg, stmt, conditional)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names[stmt.name] = dict(kind='function', conditional=conditional,
                                        **_params(stmt))
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for t in targets:
                    if isinstance(t, ast.Name):
                        names[t.id] = {'kind': 'value', 'conditional': conditional}
            elif isinstance(stmt, ast.ImportFrom):
                src = self._abs(module, is_pkg, stmt.level, stmt.module)
                for alias in stmt.names:
                    if alias.name == '*':
                        continue
                    names[alias.asname or alias.name] = {'kind': 'import', 'from': src,
                                                         'name': alias.name,
                                                         'conditional': conditional}
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    names[alias.asname or alias.name.split('.')[0]] = {
                        'kind': 'module', 'module': alias.name, 'conditional': conditional}

    def _class(self, module, is_pkg, node, conditional):
        members, methods, nested, slots = set(), {}, {}, None
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                methods[stmt.name] = _params(stmt)
            elif isinstance(stmt, ast.ClassDef):
                nested[stmt.name] = self._class(module, is_pkg, stmt, False)
            elif isinstance(stmt, ast.Assign):
                for t in stmt.targets:
                    if isinstance(t, ast.Name):
                        members.add(t.id)
                        if t.id == '__slots__' and isinstance(stmt.value, (ast.List, ast.Tuple)):
                            slots = [e.value for e in stmt.value.elts
                                     if isinstance(e, ast.Constant)]
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                members.add(stmt.target.id)
        bases = [ast.unparse(b) for b in node.bases]
        return {'kind': 'class', 'conditional': conditional, 'bases': bases,
                'attributes': sorted(members), 'methods': methods, 'nested': nested,
                'slots': slots, '_module': module, '_is_pkg': is_pkg}

    def resolve(self, module, name, depth=0):
        """The definition of `module`.`name` (following imports inside this package)."""
        names = self.module(module)
        if names is None or name not in names or depth > 8:
            if names is not None and name not in names:
                sub = self.module(module + '.' + name)
                if sub is not None:
                    return {'kind': 'module', 'module': module + '.' + name}
            return None
        d = names[name]
        if d['kind'] == 'import' and d['from'] and d['from'].split('.')[0] == self.root:
            target = self.resolve(d['from'], d['name'], depth + 1)
            if target is None and self.module(d['from'] + '.' + d['name']) is not None:
                return {'kind': 'module', 'module': d['from'] + '.' + d['name']}
            if target is not None:
                return dict(target, conditional=d['conditional'] or target['conditional'])
            return dict(d, kind='opaque')
        if d['kind'] == 'import':
            return dict(d, kind='opaque')
        return d

    def flatten(self, cls, depth=0):
        """Class facts with members of base classes defined in this package merged in."""
        methods, attrs, nested = {}, set(cls['attributes']), dict(cls['nested'])
        opaque_bases, enum_base = [], None
        for base in cls['bases']:
            found = None
            head = base.split('[')[0]
            if re.fullmatch(r'[A-Za-z_][\w.]*', head):
                mod_names = self.module(cls['_module']) or {}
                first, _, rest = head.partition('.')
                if first in mod_names:
                    d = mod_names[first]
                    if d['kind'] == 'class' and not rest:
                        found = d
                    elif d['kind'] in ('import', 'class') and not rest:
                        r = self.resolve(cls['_module'], first)
                        found = r if r and r['kind'] == 'class' else None
            if found is not None and depth < 8:
                flat = self.flatten(found, depth + 1)
                methods.update(flat['methods'])
                attrs.update(flat['attributes'])
                nested.update(flat['nested'])
                opaque_bases += flat['opaque_bases']
                enum_base = enum_base or flat['enum_base']
            elif head not in ('object', 'Generic', 'Protocol') + ENUM_BASES:
                opaque_bases.append(base)
            if head in ENUM_BASES and enum_base is None:
                enum_base = head
        methods.update(cls['methods'])
        init = methods.get('__init__')
        kwargs_from_slots = None
        if init and init['var_keyword'] and cls['slots']:
            kwargs_from_slots = sorted(s.lstrip('_') for s in cls['slots'])
        return {'kind': 'class', 'conditional': cls['conditional'],
                'methods': dict(sorted(methods.items())), 'attributes': sorted(attrs),
                'nested': {k: self.flatten(v, depth + 1) for k, v in sorted(nested.items())},
                'init_kwargs_from_slots': kwargs_from_slots,
                'opaque_bases': sorted(set(opaque_bases)), 'enum_base': enum_base}


def public(d, ext):
    """The JSON form of one resolved name."""
    if d is None:
        return None
    if d['kind'] == 'class':
        return ext.flatten(d)
    return {k: v for k, v in d.items() if not k.startswith('_')}


def _logger_rule(tree):
    """Whether this rclpy refuses a logger call site whose severity changes between calls, and
    what identifies a call site (rclpy/impl/rcutils_logger.py)."""
    text = tree.read('impl/rcutils_logger.py') or ''
    m = re.search(r"(?i:namedtuple)\(\s*'CallerId',\s*\[(.*?)\]\)", text, re.S)
    return {'severity_fixed_per_call_site':
            'Logger severity cannot be changed between calls' in text,
            'call_site': re.findall(r"'(\w+)'", m.group(1)) if m else None,
            'source': tree.describe() + ': rclpy/impl/rcutils_logger.py'}


def api_facts(mirrors, kilted_site, jazzy_site):
    uses = scan_package(REPO)
    wanted = {m: set(n) for m, n in EXTRA_NAMES.items()}
    for u in uses:
        wanted.setdefault(u.module, set())
        if u.name:
            wanted[u.module].add(u.name.split('.')[0])
    trees = {}
    for distro in ('humble', 'jazzy', 'kilted'):
        trees[distro] = {}
        for root, (mirror, prefix) in PY_ROOTS.items():
            git_dir = Path(mirrors) / mirror / 'repo'
            site = {'kilted': kilted_site, 'jazzy': jazzy_site}.get(distro)
            if site and root == 'rclpy':
                tree = DirTree(Path(site) / 'rclpy', 'ros-rclpy '
                               + _dist_version(site, 'ros_rclpy')
                               + f' wheel (PyPI, {distro.capitalize()}), installed here')
                tree_prefix_ok = True
            else:
                branch = distro if distro != 'kilted' else 'rolling'
                tree = GitTree(git_dir, branch, prefix + root + '/')
                tree.prefix = prefix + root + '/'
                tree_prefix_ok = True
            assert tree_prefix_ok
            trees[distro][root] = tree
    out = {}
    for distro, by_root in trees.items():
        modules, sources = {}, {}
        for root, tree in by_root.items():
            ext = Extractor(root, tree)
            sources[root] = tree.describe()
            for module in sorted(m for m in wanted if m.split('.')[0] == root):
                names = ext.module(module)
                if names is None:
                    modules[module] = None
                    continue
                entry = {}
                for name in sorted(wanted[module]):
                    entry[name] = public(ext.resolve(module, name), ext)
                if module == 'rclpy.node' or 'Node' in wanted[module]:
                    pass
                modules[module] = entry
        out[distro] = {'sources': sources, 'modules': modules,
                       'logger': _logger_rule(by_root['rclpy'])}
    return out


def _dist_version(site, dist):
    for info in Path(site).glob(dist + '-*.dist-info'):
        return info.name[len(dist) + 1:-len('.dist-info')]
    return '?'


def _subscription_arguments(site):
    """The C Subscription constructor's argument count, from the pybind11 signature of the
    rclpy wheel in `site`, read by that venv's own Python (one rclpy per process)."""
    python = Path(site).parents[2] / 'bin' / 'python'
    probe = ('from rclpy.impl.implementation_singleton import rclpy_implementation as r\n'
             'sig = (r.Subscription.__init__.__doc__ or "").strip().splitlines()[0]\n'
             'print(len(sig[sig.index("(") + 1:sig.rindex(")")].split(",")[1:]))\n')
    # Not this process's environment: the wheels' start-up hook put their own library folders
    # in LD_LIBRARY_PATH, where another distro's rclpy would load the wrong libraries.
    env = {k: v for k, v in os.environ.items()
           if k not in ('LD_LIBRARY_PATH', 'AMENT_PREFIX_PATH', 'PYTHONPATH',
                        '_ROS_WHEELS_BOOTSTRAP_COMPLETE')}
    run = subprocess.run([str(python), '-c', probe], capture_output=True, text=True, env=env)
    if run.returncode != 0:
        return {'arguments': None, 'source': f'not read: {run.stderr.strip()[-300:]}'}
    return {'arguments': int(run.stdout), 'source': 'the installed ros-rclpy '
            + _dist_version(site, 'ros_rclpy') + ' wheel (pybind11 signature)'}


def c_facts(mirrors, kilted_site, jazzy_site):
    """Facts only the compiled parts hold: the Subscription constructor, discovery variables."""
    def git(repo, *args):
        return subprocess.run(['git', '--git-dir', str(Path(mirrors) / repo / 'repo'), *args],
                              capture_output=True, text=True).stdout
    facts = {}
    text = git('ros2+rclpy', 'show', 'humble:rclpy/src/rclpy/subscription.cpp')
    m = re.search(r'py::init<([^>]*)>', text)
    facts['humble'] = {'rclpy_implementation.Subscription': {
        'arguments': len(m.group(1).split(',')) if m else None,
        'source': 'ros2/rclpy humble:rclpy/src/rclpy/subscription.cpp (py::init)'}}
    for distro, site in (('jazzy', jazzy_site), ('kilted', kilted_site)):
        facts[distro] = {'rclpy_implementation.Subscription': _subscription_arguments(site)}
    # Discovery: what rcl reads.
    humble = git('ros2+rcl', 'grep', '-l', 'ROS_AUTOMATIC_DISCOVERY_RANGE', 'humble', '--', 'rcl')
    facts['humble']['discovery'] = {
        'ROS_LOCALHOST_ONLY': 'ROS_LOCALHOST_ONLY' in git(
            'ros2+rcl', 'show', 'humble:rcl/src/rcl/localhost.c'),
        'ROS_AUTOMATIC_DISCOVERY_RANGE': bool(humble.strip()),
        'source': 'ros2/rcl humble: rcl/src/rcl/localhost.c, grep of rcl/'}
    init_c = git('ros2+rcl', 'show', 'rolling:rcl/src/rcl/init.c')
    date = git('ros2+rcl', 'log', '-1', '--format=%cs', 'rolling').strip()
    facts['jazzy']['discovery'] = {
        'ROS_LOCALHOST_ONLY': 'deprecated, still honoured, and prevails over the range'
        if 'ROS_LOCALHOST_ONLY is deprecated but still honored' in init_c else None,
        'ROS_AUTOMATIC_DISCOVERY_RANGE': 'RCL_AUTOMATIC_DISCOVERY_RANGE_ENV_VAR' in git(
            'ros2+rcl', 'show', 'rolling:rcl/src/rcl/discovery_options.c'),
        'source': f'ros2/rcl rolling at {date} (the mirror has no jazzy branch; jazzy branched '
                  'from rolling in 2024-04): rcl/src/rcl/init.c, discovery_options.c'}
    lib = Path(kilted_site).parents[2] / 'lib' / 'librcl.so'
    strings = lib.read_bytes() if lib.is_file() else b''
    facts['kilted']['discovery'] = {
        'ROS_LOCALHOST_ONLY': b'ROS_LOCALHOST_ONLY' in strings if strings else None,
        'ROS_AUTOMATIC_DISCOVERY_RANGE': b'ROS_AUTOMATIC_DISCOVERY_RANGE' in strings
        if strings else None,
        'source': 'strings of librcl.so of the ros-rcl ' + _dist_version(kilted_site, 'ros_rcl')
                  + ' wheel installed here (no kilted branch in the mirror)'}
    # Fast DDS: which variable names the XML profiles file.
    for distro, branch in (('humble', '2.6.x'), ('jazzy', '2.14.x'), ('kilted', '3.2.x')):
        text = git('eProsima+Fast-DDS', 'grep', '-h', 'DEFAULT_PROFILES_FILE"', branch, '--',
                   'src/cpp')
        facts[distro]['fastdds_profiles_variable'] = {
            'names': sorted(set(re.findall(r'"(\w+_DEFAULT_PROFILES_FILE)"', text))),
            'builtin_transports_variable': 'FASTDDS_BUILTIN_TRANSPORTS' in git(
                'eProsima+Fast-DDS', 'grep', '-h', 'FASTDDS_BUILTIN_TRANSPORTS', branch, '--',
                'src/cpp/rtps/participant'),
            'source': f'eProsima/Fast-DDS {branch}: src/cpp (XMLParserCommon.cpp, '
                      'RTPSParticipantImpl.cpp)'}
        shm = git('eProsima+Fast-DDS', 'show',
                  f'{branch}:src/cpp/rtps/transport/shared_mem/SharedMemTransport.cpp')
        m = re.search(r'#define SHM_MANAGER_DOMAIN \("(\w+)"\)', shm)
        facts[distro]['fastdds_shm_segments'] = {
            'prefix': f'/dev/shm/{m.group(1)}_' if m else None,
            'source': f'eProsima/Fast-DDS {branch}: src/cpp/rtps/transport/shared_mem/'
                      'SharedMemTransport.cpp (SHM_MANAGER_DOMAIN)'}
    return facts


def rosdep_facts(mirrors):
    git_dir = str(Path(mirrors) / 'ros+rosdistro' / 'repo')

    def show(path):
        return subprocess.run(['git', '--git-dir', git_dir, 'show', f'HEAD:{path}'],
                              check=True, capture_output=True, text=True).stdout
    commit = subprocess.run(['git', '--git-dir', git_dir, 'log', '-1', '--format=%H %cs'],
                            check=True, capture_output=True, text=True).stdout.split()
    base = yaml.safe_load(show('rosdep/base.yaml'))
    python = yaml.safe_load(show('rosdep/python.yaml'))
    import xml.etree.ElementTree as ET
    root = ET.parse(REPO / 'package.xml').getroot()
    keys = sorted({e.text.strip() for e in root if e.tag.endswith('depend')} | set(CANDIDATE_KEYS))
    index = yaml.safe_load(show('index-v4.yaml'))['distributions']
    status = {d: index[d].get('distribution_status') for d in ('foxy',) + DISTROS}
    out = {'source': f'ros/rosdistro {commit[0][:12]} ({commit[1]}): <distro>/distribution.yaml,'
                     ' rosdep/base.yaml, rosdep/python.yaml, index-v4.yaml',
           'ubuntu': UBUNTU, 'distribution_status': status, 'keys': {}}
    for distro in DISTROS:
        dist = yaml.safe_load(show(f'{distro}/distribution.yaml'))['repositories']
        released = {}
        for repo, info in dist.items():
            rel = info.get('release', {})
            for pkg in rel.get('packages', [repo]):
                released[pkg] = rel.get('version')
        for key in keys:
            res = None
            if key in released and released[key]:
                res = {'ros_package': released[key].split('-')[0]}
            else:
                rule = base.get(key) or python.get(key)
                res = _ubuntu_rule(rule, UBUNTU[distro]) if rule else None
            out['keys'].setdefault(key, {})[distro] = res
    return out


def _ubuntu_rule(rule, codename):
    """What rosdep installs for `rule` on Ubuntu `codename`: {'apt': [...]} / {'pip': [...]}."""
    if not isinstance(rule, dict):
        return None
    ub = rule.get('ubuntu', rule.get('*'))
    if isinstance(ub, dict) and not ({'pip', 'apt', 'packages'} & set(ub)):
        ub = ub.get(codename, ub.get('*'))
    if ub is None:
        return None
    if isinstance(ub, list):
        return {'apt': ub}
    if isinstance(ub, dict):
        if 'pip' in ub:
            return {'pip': ub['pip'].get('packages', [])}
        if 'apt' in ub:
            return {'apt': ub['apt'].get('packages', ub['apt'])}
        if 'packages' in ub:
            return {'apt': ub['packages']}
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--mirrors', default='/work/.mirror',
                    help='folder of git mirrors <owner>+<repo>/repo (the fetch tool\'s layout)')
    ap.add_argument('--kilted-site', default=str(REPO / '.venv/lib/python3.11/site-packages'),
                    help='site-packages holding the ros-rclpy (Kilted) wheel')
    ap.add_argument('--jazzy-site',
                    default=str(REPO / '.venv-jazzy/lib/python3.11/site-packages'),
                    help='site-packages holding the ros-rclpy (Jazzy) wheel (make setup '
                         'DISTRO=jazzy)')
    args = ap.parse_args()
    data = REPO / 'test' / 'data'
    data.mkdir(exist_ok=True)
    api = {'generated_by': 'scripts/distro_facts.py',
           'generated_on': datetime.date.today().isoformat(),
           'not_checked': {
               'lyrical': 'no lyrical branch in the rclpy/launch/launch_ros mirrors',
               'rolling': 'the mirrors\' rolling branches (rclpy 8.0.0, 2024-12) predate Kilted'},
           'distros': api_facts(args.mirrors, args.kilted_site, args.jazzy_site),
           'compiled': c_facts(args.mirrors, args.kilted_site, args.jazzy_site)}
    (data / 'distro_api.json').write_text(json.dumps(api, indent=1, sort_keys=True) + '\n')
    (data / 'rosdep_keys.json').write_text(
        json.dumps(rosdep_facts(args.mirrors), indent=1, sort_keys=True) + '\n')
    print(f'wrote {data / "distro_api.json"} and {data / "rosdep_keys.json"}')


if __name__ == '__main__':
    main()
