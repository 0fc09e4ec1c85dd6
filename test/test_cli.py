"""The `simreal` operator CLI against real node processes (no ros2cli)."""
import os
from pathlib import Path
import signal
import subprocess
import sys

import pytest

from conftest import REPO, simreal
from rosproc import wait_for

pytestmark = pytest.mark.ros


@pytest.mark.parametrize('argv,node,service', [
    (['estop'], 'safety_supervisor', '/safety/estop'),
    (['reset'], 'safety_supervisor', '/safety/reset'),
    (['stage', 'next'], 'safety_supervisor', '/safety/advance_stage'),
    (['enable'], 'policy_runner', '/policy_runner/enable'),
    (['gap'], 'sim_bridge', '/sim_bridge/evaluate_gap'),
    (['export'], 'sim_bridge', '/sim_bridge/export'),
    (['refine'], 'sim_bridge', '/sim_bridge/refine'),
    (['-n', 'left', 'disable'], 'policy_runner', '/left/policy_runner/enable'),
])
def test_a_missing_node_is_named_not_a_traceback(argv, node, service):
    code, out = simreal(*argv)
    assert code == 1, out
    assert f'{node} is not running: service {service} not found' in out
    assert 'ROS_DOMAIN_ID=' + os.environ['ROS_DOMAIN_ID'] in out
    assert 'Traceback' not in out


def test_status_and_sysid_without_a_graph():
    code, out = simreal('status')
    assert code == 1 and 'safety_supervisor is not running: nothing on /safety/state' in out
    code, out = simreal('sysid', 'friction')
    assert code == 1 and 'friction_id is not running: service /friction_id/start' in out
    assert 'Traceback' not in out
    code, out = simreal('gap', '--live', '--seconds', '8')
    assert code == 1 and 'sim_bridge is not running' in out and '/sim_bridge/live_gap' in out
    assert 'Traceback' not in out


_READER = ('import json, sys; from simreal_ros.client.ros import Ros, Missing, safety_state\n'
           'r = Ros("late")\ntry: print(json.dumps(safety_state(r, timeout=float(sys.argv[1]))))\n'
           'except Missing as exc: print(exc); sys.exit(1)\nfinally: r.close()')
_PUBLISHER = ('import sys, time, rclpy; from std_msgs.msg import String\n'
              'from simreal_ros.nodes.common import LATCHED_QOS\n'
              'time.sleep(float(sys.argv[1])); rclpy.init(); n = rclpy.create_node("late_pub")\n'
              'p = n.create_publisher(String, "/late/safety/state", LATCHED_QOS)\n'
              'if sys.argv[2] == "publish": p.publish(String(data=\'{"estop": false}\'))\n'
              'time.sleep(30)')


def test_safety_state_waits_for_a_late_supervisor_and_names_a_silent_one():
    """ci51: `simreal -n right status` beside two robots' eleven processes discovered nothing
    in 3 s while the supervisor ran, and said it was not running. The reader now waits for the
    graph to show a publisher (SERVICE_WAIT_S, as a service call does), then for its message."""
    def run(delay, mode, timeout):
        pub = subprocess.Popen([sys.executable, '-c', _PUBLISHER, str(delay), mode], cwd=REPO)
        try:
            return subprocess.run([sys.executable, '-c', _READER, str(timeout)], cwd=REPO,
                                  capture_output=True, text=True, timeout=60)
        finally:
            pub.kill()
            pub.wait()
    # A supervisor that appears 5 s after the reader started (a 3 s read gave up before).
    out = run(5.0, 'publish', 3.0)
    assert out.returncode == 0 and '"estop": false' in out.stdout, out.stdout + out.stderr
    # One that is there but sends nothing: named, not "not running".
    out = run(0.0, 'silent', 2.0)
    assert out.returncode == 1, out.stdout + out.stderr
    assert '/late_pub on /late/safety/state sent nothing within 2 s' in out.stdout, out.stdout


def test_bad_arguments_are_usage_errors():
    code, out = simreal('sysid', 'stiffness')
    assert code == 2 and "invalid choice: 'stiffness'" in out
    code, out = simreal('up', '--robot', 'no_such_bot')
    assert code == 2 and "unknown robot 'no_such_bot'" in out and 'Traceback' not in out


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f'/proc/{pid}/stat').read_text().split()[2] != 'Z'


def test_up_estop_status_enable_and_ctrl_c(tmp_path):
    """simreal up starts the graph; estop/status/enable reach it; Ctrl-C stops every node."""
    sys.path.insert(0, str(REPO / 'scripts'))
    import onnx_policies
    policy = onnx_policies.arm3(str(tmp_path / 'arm3_policy.onnx'))
    env = dict(os.environ, ROS_HOME=str(tmp_path / 'ros_home'), PYTHONUNBUFFERED='1')
    log = open(tmp_path / 'up.log', 'w+')
    record = tmp_path / 'session.mcap'
    up = subprocess.Popen([sys.executable, '-m', 'simreal_ros.client.cli', 'up', '--policy', policy,
                           '--record', str(record)],
                          cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)

    def output():
        log.seek(0)
        return log.read()
    try:
        wait_for(lambda: 'started policy_runner' in output(), 60, what='simreal up to start')
        pids = [int(line.split('pid ')[1].rstrip(')')) for line in output().splitlines()
                if line.startswith('started ')]
        assert len(pids) == 3
        wait_for(lambda: simreal('status', env=env)[0] == 0, 120, interval=1.0,
                 what='status to reach safety_supervisor')
        code, out = simreal('estop', env=env)
        assert code == 0 and out.startswith('estop: ok'), out
        code, out = simreal('status', env=env)
        assert code == 0, out
        assert 'e-stop      : LATCHED' in out and 'diagnostics : safety_supervisor' in out
        code, out = simreal('enable', env=env)
        assert code == 0 and 'enabled' in out, out
        code, out = simreal('stage', 'next', env=env)
        assert code == 1 and 'stage next: REFUSED' in out and 'e-stop' in out, out
        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=40) == 0, output()
        text = output()
        assert 'Ctrl-C: stopping the graph' in text and 'stopped: ' in text
        assert 'Traceback' not in text, text[-3000:]
        wait_for(lambda: not any(_alive(p) for p in pids), 10, what='every node to exit')
        # The session recording holds the supervisor's state and the robot's joint states.
        from simreal_ros.client.record import read_joint_states
        t, names, q, _, _ = read_joint_states(record)
        assert len(t) > 100 and names == ['shoulder_yaw', 'shoulder_pitch', 'elbow_pitch']
        assert 'recorded ' in text and '/safety/state' in text
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
        log.close()


def test_sysid_run_asks_again_while_a_fresh_node_has_not_seen_joint_states(monkeypatch):
    """A SysID node started a moment ago refuses its start until its first joint_states:
    `simreal sysid` (and the demo) ask again for up to 10 s instead of failing the run."""
    import json
    from types import SimpleNamespace
    from simreal_ros.client import sysid as sysid_client
    answers = [(False, 'no joint_states with every joint of joint_names: is the robot (or '
                       'sim_robot) running?'),
               (False, 'no safety_supervisor state on safety/state: start safety_supervisor'),
               (True, 'accepted')]
    callbacks, calls = {}, []

    class Node:
        def create_subscription(self, _type, topic, callback, _qos):
            callbacks[topic] = callback
            return topic

        def destroy_subscription(self, _sub):
            pass

    class Ros:
        namespace = ''
        node = Node()

        def wait_service(self, *_):
            pass

        def trigger(self, name, _node, timeout=None):
            calls.append(name)
            ok, message = answers.pop(0)
            if ok:
                result_topic = next(t for t in callbacks if t.endswith('sysid/result'))
                callbacks[result_topic](SimpleNamespace(data=json.dumps(
                    {'experiment': 'friction', 'results': [], 'failures': []})))
            return SimpleNamespace(success=ok, message=message)
    monkeypatch.setattr(sysid_client, '_state', lambda ros: {})
    monkeypatch.setattr(sysid_client, 'select_source', lambda ros, source: (True, 'ok'))
    result = sysid_client.run(Ros(), 'friction_id', timeout=10.0)
    assert result['ok'] and calls == ['friction_id/start'] * 3, (result, calls)
    # A refusal that is no start-up state is not asked again.
    answers[:] = [(False, 'joint_states carries no effort for [elbow_pitch]')]
    calls.clear()
    result = sysid_client.run(Ros(), 'friction_id', timeout=10.0)
    assert not result['ok'] and calls == ['friction_id/start'] and 'effort' in result['message']


def test_the_status_says_why_the_stage_dwell_last_restarted():
    from simreal_ros.client.cli import format_status
    state = {'stage': {'stage': 0.5, 'stages': [0.25, 0.5, 1.0], 'stage_index': 1,
                       'clean_for_s': 0.4, 'dwell_needed_s': 2.0,
                       'last_fault': {'time': 12.5, 'cause': 'limit: rate clipped for a (asked '
                                                             '50 rad/s over 2 ms)'}}}
    lines = format_status(state, {})
    assert 'last fault  : limit: rate clipped for a (asked 50 rad/s over 2 ms) (at 12.500 s)' \
        in lines
    del state['stage']['last_fault']
    assert not any(line.startswith('last fault') for line in format_status(state, {}))


def test_a_ros_teardown_that_hangs_is_not_waited_for():
    """Seen once in CI on Jazzy: `simreal -n left estop` printed that the e-stop had latched,
    then did not exit within 60 s. The teardown is bounded: a node whose destruction hangs
    leaves close() False after its wait, not blocked."""
    import threading
    import time
    from types import SimpleNamespace
    from simreal_ros.client.ros import Ros
    ros = Ros.__new__(Ros)
    ros._stop = threading.Event()
    ros._thread = threading.Thread(target=ros._stop.wait)
    ros._thread.start()
    hang = threading.Event()
    ros.node = SimpleNamespace(destroy_node=hang.wait)
    ros.rclpy = SimpleNamespace(try_shutdown=lambda: None)
    t0 = time.monotonic()
    assert ros.close(wait=0.3) is False
    assert time.monotonic() - t0 < 2.0
    hang.set()
    ros.node = SimpleNamespace(destroy_node=lambda: None)
    assert ros.close(wait=2.0) is True


def test_the_verb_exits_with_its_answer_when_the_teardown_hangs():
    """The CLI's main: the verb answered 0, the teardown hung, and a thread that would hold
    the interpreter's exit is still running; the process still ends, with the verb's exit code
    and a line that says why."""
    code = (
        'import sys, threading\n'
        'from simreal_ros.client import cli\n'
        'class Hung:\n'
        '    def __init__(self, namespace): pass\n'
        '    def close(self): return False\n'
        'cli.Ros = Hung\n'
        "cli.VERBS['estop'] = lambda args, ros: print('estop: ok') or 0\n"
        'threading.Thread(target=threading.Event().wait).start()\n'
        "sys.exit(cli.main(['estop']))\n")
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         timeout=60, cwd=str(REPO))
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert 'estop: ok' in out.stdout
    assert 'teardown did not finish' in out.stderr, out.stderr
