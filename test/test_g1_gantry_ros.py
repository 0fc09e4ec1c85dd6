"""The G1 gantry session end to end by the `ros2` command line, as a ROS user drives it.

docs/sysid.md's G1 block, run as it is: `ros2 launch simreal_ros deploy.launch.py
robot:=g1_12dof sysid:=true` starts the simulated G1 bolted 0.3 m up in its gantry with the
robot file's hidden plant, the three SysID nodes and sim_bridge (which replays with the base
fixed there, gantry_lift 0.3). Then, each a `ros2` process: the left knee's friction and
inertia experiments (`<kind>_id/start`, the result awaited with `ros2 topic echo --once
--filter`), the values the nodes pushed to sim_bridge read back with `ros2 param get`,
`sim_bridge/evaluate_gap`, `sim_bridge/export` and `ros2 run simreal_ros simreal sysid report`.
It checks what a user reads: the estimates near the hidden plant, the pushed value equal to the
result, a finite gap for the nominal and the identified model (the identified one smaller),
the exported floating-base MJCF carrying the identified knee, the report pages, a clean stop.

The `~` of the robot file's folders (results_dir, recordings_dir, export_dir, the report) is
a home of the test's own (HOME), so every file is the test's. About 42 s of robot time; the
whole test takes 2-3 min on a 2-core machine.
"""
import json
import math
import os
from pathlib import Path
import re
import shlex
import subprocess
import xml.etree.ElementTree as ET

import mujoco
import pytest
import yaml

from conftest import REPO, require_files
from rosproc import wait_for
from simreal_ros.core.bridge.params import params_in_model
from test_launch_real import (SYSID_NODES, Launch, assert_stopped_cleanly, echo_until_result)

pytestmark = [pytest.mark.ros, pytest.mark.ros_native]

DOC = REPO / 'docs' / 'sysid.md'
CONFIG = yaml.safe_load((REPO / 'config' / 'robots' / 'g1_12dof.yaml').read_text())
JOINT = 'left_knee_joint'
EXPECTED = [
    'ros2 launch simreal_ros deploy.launch.py robot:=g1_12dof sysid:=true &',
    'ros2 param set /friction_id joints', 'ros2 param set /inertia_id joints',
    'ros2 service call /safety/reset', 'ros2 service call /policy_runner/enable',
    'ros2 service call /safety/select_sysid', 'ros2 service call /friction_id/start',
    'ros2 topic echo --once', 'ros2 service call /inertia_id/start', 'ros2 topic echo --once',
    'ros2 param get /sim_bridge', 'ros2 service call /sim_bridge/evaluate_gap',
    'ros2 service call /sim_bridge/export', 'ros2 run simreal_ros simreal sysid report']
CALL_TIMEOUT_S = 60.0


def gantry_sequence():
    """Return docs/sysid.md's G1 block: one argv per command line, in order."""
    match = re.search(r'<!-- g1-gantry-sequence[^>]*-->\s*```bash\n(.*?)```', DOC.read_text(),
                      re.S)
    assert match, f'{DOC} has no <!-- g1-gantry-sequence --> block'
    block = match.group(1).replace('\\\n', ' ')    # continuation lines
    return [words for words in (shlex.split(line, comments=True)
                                for line in block.splitlines()) if words]


def run(user, cwd, words, timeout=CALL_TIMEOUT_S):
    """Run one `ros2 ...` line as typed; return (exit code, stdout + stderr).

    A line still waiting after `timeout` fails the test with the line and what it printed:
    `ros2 service call` waits for ever for a service nobody offers, so the message then names
    the services that node does serve (`ros2 node info`).
    """
    exe, env = user
    line = ' '.join(words)
    try:
        done = subprocess.run([exe, *words[1:]], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        said = exc.stdout.decode(errors='replace') if isinstance(exc.stdout, bytes) \
            else (exc.stdout or '')
        if 'making request' in said:
            pytest.fail(f'`{line}`: the service took the request but did not answer within '
                        f'{timeout:.0f} s', pytrace=False)
        if words[1:3] != ['service', 'call']:
            pytest.fail(f'`{line}` did not end within {timeout:.0f} s: {said[-300:]!r}',
                        pytrace=False)
        node = '/' + words[3].strip('/').split('/')[0]
        pytest.fail(f'`{line}`: no such service in {timeout:.0f} s (ros2 printed '
                    f'{said.strip()[-200:]!r}); {served(user, cwd, node)}', pytrace=False)
    return done.returncode, done.stdout + done.stderr


def served(user, cwd, node):
    """A sentence naming the services `node` serves (its parameter services left out)."""
    exe, env = user
    info = subprocess.run([exe, 'node', 'info', node], cwd=cwd, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    servers = re.search(r'Service Servers:\n(.*?)\n  \S', info.stdout, re.S)
    if not servers:
        return f'no node {node}: {info.stdout.strip()[-300:] or info.stderr.strip()[-300:]}'
    names = [line.split(':')[0].strip() for line in servers.group(1).splitlines()
             if line.strip() and 'parameter' not in line and 'type_description' not in line]
    return f'{node} serves {", ".join(names)}'


def typed(user, cwd, words):
    """Run one line until it answers; return its output (exit code 0 checked).

    Typed again, as a user does, only on two answers that say "not yet": `ros2 param`'s
    "Node not found" (the ros2 daemon behind the graph, ci16 in test_launch_real.py) and a
    SysID start refused while the previous experiment still holds the SysID path (released
    1 s after its last command: sysid_release_s). Each retry is printed; 30 s at most.
    """
    outs = []

    def once():
        outs.append(run(user, cwd, words))
        code, out = outs[-1]
        again = 'Node not found' in out or (words[-2].endswith('_id/start')
                                            and 'grants the SysID path to' in out)
        if again:
            print(f'RETRY {" ".join(words[:4])}: {out.strip()[-200:]}')
        return not again
    wait_for(once, 30, interval=2.0, what=f'{" ".join(words[:4])} answering')
    code, out = outs[-1]
    assert code == 0, f'`{" ".join(words)}` exited {code}: {out[-2000:]}'
    if words[1] == 'service':
        assert 'success=True' in out, f'`{" ".join(words)}`: {out[-2000:]}'
    return out


def result_doc(home, kind):
    """The newest result file of `kind` in the SysID nodes' results_dir (~ is `home`)."""
    files = sorted((home / '.ros' / 'simreal_ros' / 'sysid').glob(f'g1_12dof_{kind}_*.yaml'))
    assert files, f'no g1_12dof_{kind}_*.yaml in {home}/.ros/simreal_ros/sysid'
    return yaml.safe_load(files[-1].read_text())


def service_message(out):
    """The `message` field of a std_srvs/Trigger answer as `ros2 service call` prints it."""
    found = re.search(r"message=(['\"])(.*)\1\)", out, re.S)
    assert found, out[-2000:]
    return found.group(2)


def check_results(home):
    """Both experiments ran on the knee without failures, near the hidden plant."""
    plant = CONFIG['/**/sim_robot']['ros__parameters']['plant']
    i = CONFIG['/**']['ros__parameters']['joint_names'].index(JOINT)
    got = {}
    for kind in ('friction', 'inertia'):
        doc = result_doc(home, kind)
        assert doc['experiment'] == kind and not doc['failures'], doc
        got.update({r['parameter']: r for r in doc['results'] if r['joint'] == JOINT})
    print({k: round(r['value'], 5) for k, r in got.items()})
    for parameter in ('coulomb_friction', 'viscous_damping', 'armature'):
        assert got[parameter]['value'] == pytest.approx(plant[parameter][i], rel=0.15), \
            (parameter, got[parameter], plant[parameter][i])
    return got


def check_gap(out):
    """`PASS|FAIL: gap X % (threshold ...), nominal Y %, ...`: both finite, X below Y."""
    message = service_message(out)
    found = re.match(r'(PASS|FAIL): gap (\S+) % \(threshold (\S+) %\), nominal (\S+) %',
                     message)
    assert found, message
    verdict, gap, threshold, nominal = found.group(1), *map(float, found.groups()[1:])
    print(f'evaluate_gap: {message}')
    assert all(math.isfinite(v) for v in (gap, threshold, nominal)), message
    assert gap < nominal, message    # the identified knee is closer to the robot than the MJCF
    assert (verdict == 'PASS') == (gap <= threshold), message
    return gap, nominal


def check_export(out, got):
    """The export's files exist; the MJCF is the floating-base robot with the identified knee."""
    paths = json.loads(service_message(out))
    print(f'export: {paths}')
    for key, path in paths.items():
        assert Path(path).is_file(), (key, path)
    assert 'report' in paths, paths     # written after evaluate_gap, with its replay
    mjcf = next(Path(p) for p in paths.values() if p.endswith('.xml'))
    root = ET.parse(mjcf).getroot()
    assert root.find('.//freejoint') is not None or any(
        j.get('type') == 'free' for j in root.iter('joint')), f'{mjcf}: no floating base'
    knee = next(j for j in root.iter('joint') if j.get('name') == JOINT)
    assert float(knee.get('frictionloss')) == pytest.approx(got['coulomb_friction']['value'],
                                                            rel=1e-4), knee.attrib
    # The armature is the knee's own, less what MuJoCo's implicit damping adds at the MJCF's
    # time step (sim_bridge's, Euler): read back, it is the identified value.
    model = mujoco.MjModel.from_xml_path(str(mjcf))
    back = params_in_model(model, [JOINT])
    assert float(knee.get('armature')) < got['armature']['value']
    assert back.armature[0] == pytest.approx(got['armature']['value'], rel=1e-4), knee.attrib
    return paths


def test_g1_gantry_session_by_ros2_command_lines(ros2_env, ros2_service_call, tmp_path):
    require_files('g1_12dof')
    sequence = gantry_sequence()
    assert [' '.join(w)[:len(e)] for w, e in zip(sequence, EXPECTED)] == EXPECTED, sequence
    assert len(sequence) == len(EXPECTED), sequence
    home = tmp_path / 'home'
    home.mkdir()
    exe, env = ros2_env
    user = (exe, dict(env, HOME=str(home)))
    launch = Launch(user, tmp_path, sequence[0][3:-1], name='g1_gantry')
    try:
        # As a user who sees the launch up: every node said it is ready, and the ros2
        # daemon (which `ros2 param` asks) lists them.
        wait_for(lambda: launch.text().count('identification ready for') >= 3
                 and 'sim_bridge ready' in launch.text() or launch.proc.poll() is not None,
                 120, interval=0.5, what='the SysID nodes and sim_bridge saying they are ready')
        assert launch.proc.poll() is None, launch.text()[-3000:]
        wait_for(lambda: SYSID_NODES <= set(n.strip('/') for n in run(
            user, tmp_path, ['ros2', 'node', 'list'])[1].split()), 120, interval=0.5,
            what='ros2 node list showing the seven nodes')
        got = pushed = gap = None
        for words in sequence[1:]:
            if words[1:3] == ['topic', 'echo']:
                kind = re.search(r"'experiment: (\w+)'", ' '.join(words)).group(1)
                out = echo_until_result(user, tmp_path, words, launch)
                assert f'experiment: {kind}' in out and JOINT in out, out[-3000:]
                continue
            out = typed(user, tmp_path, words)
            if words[1:3] == ['param', 'get']:
                got = check_results(home)
                value = re.search(r'value is:\s*(\S+)', out)
                assert value, out
                pushed = float(value.group(1))
                assert pushed == pytest.approx(got['coulomb_friction']['value'], rel=1e-9), \
                    (out, got['coulomb_friction'])
            elif words[3:4] == ['/sim_bridge/evaluate_gap']:
                gap = check_gap(out)
            elif words[3:4] == ['/sim_bridge/export']:
                check_export(out, got)
            elif words[1] == 'run':
                found = re.search(r'report: (\S+report\.html)', out)
                assert found, out[-2000:]
                page = Path(found.group(1))
                assert page.is_file() and home in page.parents, page
                html = page.read_text()
                for part in (JOINT, 'friction-plot', 'gap-plot', 'g1_12dof'):
                    assert part in html, f'{page} has no {part!r}'
        assert pushed is not None and gap is not None
        assert_stopped_cleanly(launch, SYSID_NODES)
    finally:
        launch.kill()
