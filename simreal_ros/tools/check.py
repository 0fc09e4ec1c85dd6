"""Check any robot file before it moves anything (`simreal check FILE`).

    simreal check my_robot.yaml [--reference TRACE.npz | --rollout STEPS] [--cmd-vel VX VY WZ]
        [--no-nodes] [--json]

What `test/test_launch_static.py` checks for the files in config/robots/, for any file, plus
sizes, paths and the limits:

- the file loads, every section names a node of the graph (`/**/<node>`), joint_names is set;
- paths: every `*_path` of every section resolves, relative to the robot file's folder first
  (then the current directory, then the source checkout: core/config.resolve_path);
- sizes: kp and kd per joint; sim_robot's joints are hinge/slide joints of its model,
  initial_position per joint; the observation's length against the ONNX input and the action
  width against policy_joint_names (policy_runner's own checks: core/policy.PolicyController);
- safety_supervisor's parameters as the supervisor reads them (core/safety SupervisorConfig),
  the bring-up pose inside the position limits;
- declared parameters: every node the file configures is built in this process, isolated, as
  tools/params_doc does, and every parameter the file gives it must be one it declares (a
  misspelt one is ignored by ROS otherwise); `--no-nodes` skips this;
- the limits replay: a reference trace (`--reference`, or `--rollout N` steps of the package's
  MuJoCo loop, tools/reference_rollout.py) replayed through the supervisor's own limit filter
  at stage 1.00 (core/limits_replay.py): a clip there is an error, the trained motion would be
  changed; the same replay with each other step half a period late (a loaded real-time
  computer's jitter) reports its clips as a warning with figures, an error only when the
  supervisor would stop the motion (a safe output).

Every finding names the file, the section and the parameter. Exit code 0: no error; 1: errors.
"""
from dataclasses import dataclass, field
import json
from pathlib import Path

import numpy as np

from simreal_ros.core.config import ConfigError, load_node_params, read_yaml, resolve_path, \
    robot_config_path

KNOWN_SECTIONS = ('deploy',)


@dataclass
class Report:
    """Findings: (level 'error' | 'warning' | 'ok', section, text)."""

    path: str
    findings: list = field(default_factory=list)

    def add(self, level, section, text):
        self.findings.append((level, section, text))

    @property
    def errors(self):
        return [f for f in self.findings if f[0] == 'error']

    def lines(self):
        return [f'{level.upper():7} {self.path}: {section}: {text}'
                for level, section, text in self.findings]

    def to_dict(self):
        return {'robot': self.path, 'errors': len(self.errors),
                'findings': [{'level': lv, 'section': s, 'text': t}
                             for lv, s, t in self.findings]}


def check(robot, reference=None, rollout_steps=0, cmd_vel=None, nodes=True):
    """Return the Report for a robot file (a name in config/robots/ or a path)."""
    try:
        path = robot_config_path(robot)
        data = read_yaml(path)
    except ConfigError as exc:
        report = Report(str(robot))
        report.add('error', 'file', str(exc))
        return report
    report = Report(str(path))
    from simreal_ros.deploy.graph import ALL_NODES
    if not isinstance(data, dict):
        report.add('error', 'file', 'expected a mapping of node sections')
        return report
    sections = []
    for key in data:
        name = str(key).split('/')[-1]
        if key in ('/**', '**'):
            continue
        if name not in ALL_NODES and name not in KNOWN_SECTIONS:
            report.add('error', str(key), f'no node {name!r} in the graph (nodes: '
                       f'{", ".join(ALL_NODES)})')
            continue
        if not str(key).startswith('/**/') and name not in KNOWN_SECTIONS:
            report.add('warning', str(key), f'reaches {name} only in the root namespace; '
                       f"key it '/**/{name}:'")
        sections.append(name)
    try:
        shared = load_node_params(path, '/**')
    except ConfigError as exc:
        report.add('error', '/**', str(exc))
        return report
    names = [str(n) for n in shared.get('joint_names') or []]
    if not names:
        report.add('error', '/**', 'joint_names is missing')
        return report
    for key in ('kp', 'kd'):
        value = shared.get(key)
        if value is not None and len(np.atleast_1d(value)) not in (1, len(names)):
            report.add('error', '/**', f'{key} has {len(np.atleast_1d(value))} values for '
                       f'{len(names)} joint_names')
    _paths(report, path, sections)
    if 'sim_robot' in sections:
        _sim_robot(report, path, names)
    if 'policy_runner' in sections:
        _policy(report, path)
    if 'safety_supervisor' in sections:
        _supervisor(report, path, names)
    if nodes and not report.errors:
        _declared(report, path, sections)
    if reference or rollout_steps:
        _replay(report, path, reference, rollout_steps, cmd_vel)
    if not report.errors:
        report.add('ok', 'file', f'{len(names)} joints, sections {", ".join(sections)}')
    return report


def _paths(report, path, sections):
    for section in ['/**'] + sections:
        params = load_node_params(path, section)
        for key, value in sorted(params.items()):
            if not key.endswith('_path') or not isinstance(value, str) or not value:
                continue
            try:
                resolve_path(value, what=f'parameter {key}', relative_to=Path(path).parent)
            except ConfigError as exc:
                from simreal_ros.core.onnx_policies import STAND_INS
                if Path(value).name in STAND_INS:
                    continue   # made on first use (docs/bring_your_own.md)
                report.add('error', section, str(exc))


def _sim_robot(report, path, names):
    sim = load_node_params(path, 'sim_robot')
    if not sim.get('model_path'):
        report.add('error', 'sim_robot', 'model_path is missing')
        return
    try:
        model = resolve_path(sim['model_path'], what='model_path',
                             relative_to=Path(path).parent)
        from simreal_ros.core.limits_proposal import read_model
        read_model(model, names)
    except ConfigError as exc:
        report.add('error', 'sim_robot', f'model_path: {exc} (joint_names must be its joints)')
        return
    except Exception as exc:  # noqa: BLE001 - MuJoCo's own parse errors, named
        report.add('error', 'sim_robot', f'model_path {sim["model_path"]}: {exc}')
        return
    initial = sim.get('initial_position')
    if initial is not None and len(initial) and len(initial) != len(names):
        report.add('error', 'sim_robot', f'initial_position has {len(initial)} values for '
                   f'{len(names)} joint_names')


def _policy(report, path):
    from simreal_ros.core.policy import PolicyController
    from simreal_ros.deploy.graph import _stand_in
    params = load_node_params(path, 'policy_runner')
    stand_in = _stand_in(path)
    if stand_in:   # made on first use in the user data folder, where the graph finds it
        params = dict(params, policy_path=str(stand_in))
        report.add('ok', 'policy_runner', f'policy_path {Path(stand_in).name}: the stand-in '
                   f'the package makes on first use ({stand_in})')
    try:
        ctl = PolicyController(params, source='policy_runner', params_file=path)
    except (ConfigError, ValueError) as exc:
        report.add('error', 'policy_runner', str(exc))
        return
    report.add('ok', 'policy_runner', f'observation {ctl.builder.size} = the ONNX input '
               f'({ctl.builder.describe()}); {ctl.joint_map.n} actions')


def _supervisor(report, path, names):
    from simreal_ros.core.safety import SupervisorConfig
    params = load_node_params(path, 'safety_supervisor')
    try:
        cfg = SupervisorConfig.from_params(params, 'safety_supervisor')
    except (ConfigError, ValueError) as exc:
        report.add('error', 'safety_supervisor', str(exc))
        return
    pose = params.get('bringup.default_position')
    if pose is not None and len(pose) == len(names):
        lim = cfg.limits
        outside = [f'{n} {p:g} not in [{lo:g}, {hi:g}]' for n, p, lo, hi in zip(
            names, pose, lim.position_lower, lim.position_upper) if not lo <= p <= hi]
        if outside:
            report.add('error', 'safety_supervisor', 'bringup.default_position outside '
                       'position_lower/upper: ' + '; '.join(outside))


def _declared(report, path, sections):
    from simreal_ros.deploy.graph import TOOL_PARAMETERS
    from simreal_ros.tools.params_doc import collect
    try:
        found = collect([path])
    except Exception as exc:  # noqa: BLE001 - a node that cannot be built is the finding
        report.add('error', 'nodes', f'a node cannot be built with this file: {exc}')
        return
    shared = load_node_params(path, '/**')
    used = set()
    for name, runs in found.items():
        declared = set()
        for _, _, rows in runs:
            declared |= set(rows)
        given = set(load_node_params(path, name)) - set(shared)
        for key in sorted(given - declared):
            report.add('error', name, f'parameter {key} is not declared by {name} (misspelt? '
                       'ROS would ignore it)')
        used |= set(shared) & declared
    for key in sorted(set(shared) - used - set(TOOL_PARAMETERS)):
        report.add('error', '/**', f'parameter {key} is declared by no node')


def _replay(report, path, reference, rollout_steps, cmd_vel):
    from simreal_ros.core.limits_replay import replay
    from simreal_ros.core.trace import load_trace
    try:
        if reference:
            trace = load_trace(reference, robot=path)
            what = f'the reference {reference}'
        else:
            import tempfile
            from simreal_ros.tools.reference_rollout import rollout
            arrays = rollout(str(path), steps=int(rollout_steps), cmd_vel=cmd_vel)
            tmp = Path(tempfile.mkdtemp(prefix='simreal_check_')) / 'rollout.npz'
            np.savez(tmp, **arrays)
            trace = load_trace(tmp, robot=path)
            what = (f'{rollout_steps} steps of the package\'s MuJoCo loop (cmd_vel '
                    f'{list(cmd_vel) if cmd_vel is not None else "default"})')
        params = load_node_params(path, 'safety_supervisor')
        for jitter in (0.0, JITTER):
            result = replay(params, trace, 1.0, jitter)
            report.add(replay_level(result), 'safety_supervisor', f'limits replay of {what}: '
                       f'{result.summary()}' + ('' if result.clean or not jitter else
                                                JITTER_NOTE))
    except (ConfigError, ValueError) as exc:
        report.add('error', 'safety_supervisor', f'limits replay: {exc}')


JITTER = 0.5   # the jitter replay: each other step half a period late, the next one early
JITTER_NOTE = ('; what a loaded real-time computer would clip, not the trained motion: a '
               'warning (`simreal limits --reference` proposes rate and acceleration limits '
               'with room for it)')


def replay_level(result):
    """Return the finding's level for a limits replay: error when the trained motion is
    changed at jitter 0 or the supervisor would stop it (a safe output); a jitter replay's
    clips are a warning (they are a real computer's, not the policy's)."""
    if result.clean:
        return 'ok'
    if result.safe_reason or not result.jitter:
        return 'error'
    return 'warning'


def main_check(args):
    """The `simreal check` verb: print the findings; return the exit code."""
    report = check(args.file, args.reference or None, args.rollout,
                   tuple(args.cmd_vel) if args.cmd_vel else None, nodes=not args.no_nodes)
    if args.json:
        print(json.dumps(report.to_dict()))
    else:
        for line in report.lines():
            print(line)
        print(f'simreal check: {len(report.errors)} error(s)')
    return 1 if report.errors else 0
