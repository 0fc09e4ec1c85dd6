"""The demo's parts: step outcomes, the stand-in policy, session recording read by sim_bridge."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO
from rosproc import Spinner, wait_for
from simreal_ros import demo as demo_mod


def test_steps_report_ok_skipped_failed_without_tracebacks(tmp_path, capsys):
    from simreal_ros.client.ros import Missing
    d = demo_mod.Demo('arm3', tmp_path)

    def boom():
        raise ValueError('bad value in step')

    def missing():
        raise Missing('sim_bridge is not running: service /sim_bridge/gap not found')

    def skip():
        raise demo_mod.Skip('sim_bridge not available')
    assert d.step(1, 4, 'fine', lambda: 'all good')
    assert not d.step(2, 4, 'skip', skip)
    assert not d.step(3, 4, 'missing', missing)
    assert not d.step(4, 4, 'boom', boom)
    d.report()
    out = capsys.readouterr().out
    assert [r[1] for r in d.rows] == ['ok', 'skipped', 'failed', 'failed']
    assert 'skipped: sim_bridge not available' in out
    assert 'Traceback' not in out
    assert 'Traceback' in (tmp_path / 'demo.log').read_text()   # the log keeps the detail
    summary = json.loads((tmp_path / 'summary.json').read_text())
    assert [s['status'] for s in summary['steps']] == ['ok', 'skipped', 'failed', 'failed']
    html = (tmp_path / 'report.html').read_text()
    assert 'bad value in step' in html and '<table>' in html


def test_sysid_stopped_by_an_interruption_is_run_once_more_but_a_result_stands(
        tmp_path, monkeypatch, capsys):
    from simreal_ros.client import sysid as sysid_client
    d = demo_mod.Demo('arm3', tmp_path)
    d.facts['sysid'] = {}
    answers = {   # what each SysID node's run returns, attempt after attempt
        'friction_id': [{'ok': False, 'message': 'aborted: joint_states stale'},
                        {'ok': True, 'results': []}],
        'inertia_id': [{'ok': False, 'message': 'aborted: joint_states stale'},
                       {'ok': False, 'message': 'aborted: joint_states stale'}],
        'latency_id': [{'ok': False, 'failures': [{'joint': 'elbow_pitch',
                                                   'reason': 'not enough excitation',
                                                   'detail': 'x'}]},
                       {'ok': True}],
    }
    calls = []

    def fake_run(ros, node, **_):
        calls.append(node)
        return answers[node].pop(0)
    monkeypatch.setattr(sysid_client, 'run', fake_run)
    with pytest.raises(RuntimeError) as err:
        d._sysid_runs(['friction_id', 'inertia_id', 'latency_id'])
    # Interrupted: once more (at most); a published failure is not re-rolled.
    assert calls == ['friction_id', 'friction_id', 'inertia_id', 'inertia_id', 'latency_id']
    assert 'friction_id ok; inertia_id failed; latency_id failed' in str(err.value)
    assert capsys.readouterr().out.count('retrying once') == 2


def test_fallback_policy_matches_the_arm3_stand_in(tmp_path):
    import onnx
    import onnxruntime as ort
    path = demo_mod._arm3_policy(tmp_path / 'fallback.onnx')
    model = onnx.load(path)
    assert model.ir_version <= 10
    meta = {p.key: p.value for p in model.metadata_props}
    assert meta['joint_names'] == 'shoulder_yaw,shoulder_pitch,elbow_pitch'
    sess = ort.InferenceSession(path, providers=['CPUExecutionProvider'])
    obs = np.linspace(-1, 1, 12, dtype=np.float32)[None]
    out = sess.run(None, {'obs': obs})[0]
    assert out.shape == (1, 3) and np.all(np.isfinite(out))
    generator = demo_mod._onnx_policies()
    if generator is not None:   # the same network as scripts/onnx_policies.py arm3
        ref = ort.InferenceSession(generator.arm3(str(tmp_path / 'ref.onnx')),
                                   providers=['CPUExecutionProvider'])
        assert np.allclose(ref.run(None, {'obs': obs})[0], out, atol=1e-6)


@pytest.mark.ros
def test_session_recording_is_a_recording_sim_bridge_reads(tmp_path):
    """SessionRecorder writes CDR + schema that mcap_ros2 and sim_bridge's reader decode."""
    import rclpy
    from sensor_msgs.msg import JointState
    from std_msgs.msg import String

    from simreal_ros.core.bridge.recording import read_mcap
    from simreal_ros.nodes.common import COMMAND_QOS, LATCHED_QOS, SENSOR_PUB_QOS
    from simreal_ros.record import SessionRecorder, read_joint_states
    names = ['shoulder_yaw', 'shoulder_pitch', 'elbow_pitch']
    rclpy.init()
    try:
        source = rclpy.create_node('fake_robot')
        cmd = source.create_publisher(JointState, 'hardware/command', COMMAND_QOS)
        js = source.create_publisher(JointState, 'joint_states', SENSOR_PUB_QOS)
        state = source.create_publisher(String, 'safety/state', LATCHED_QOS)
        recorder_node = rclpy.create_node('recorder')
        spin = Spinner(recorder_node)
        rec = SessionRecorder(recorder_node, tmp_path / 'session.mcap')
        wait_for(lambda: cmd.get_subscription_count() and js.get_subscription_count(), 20,
                 what='recorder subscriptions')
        state.publish(String(data='{"estop": false}'))
        sent = 0
        for k in range(1, 61):
            stamp = rclpy.time.Time(seconds=k * 0.01).to_msg()
            m = JointState(name=names, position=[0.01 * k] * 3)
            m.header.stamp = stamp
            cmd.publish(m)
            s = JointState(name=names, position=[0.01 * k] * 3, velocity=[1.0] * 3,
                           effort=[0.5] * 3)
            s.header.stamp = stamp
            js.publish(s)
            sent += 1
            wait_for(lambda: rec.counts['/hardware/command'] >= sent, 5,
                     what=f'command {sent} recorded')
        wait_for(lambda: rec.counts['/joint_states'] >= 50, 5, what='joint_states recorded')
        rec.pause()    # no subscriptions: nothing arrives, nothing is written
        wait_for(lambda: cmd.get_subscription_count() == 0, 20, what='recorder unsubscribed')
        cmd.publish(JointState(name=names, position=[9.0] * 3))
        rec.resume()
        wait_for(lambda: cmd.get_subscription_count(), 20, what='recorder subscribed again')
        m = JointState(name=names, position=[0.61] * 3)
        m.header.stamp = rclpy.time.Time(seconds=0.61).to_msg()
        cmd.publish(m)
        wait_for(lambda: rec.counts['/hardware/command'] >= 61, 5, what='command after resume')
        # Until it is closed, the recording is not where readers look for complete files.
        from simreal_ros.core.bridge.recording import latest_recording
        assert not (tmp_path / 'session.mcap').exists() and latest_recording(tmp_path) is None
        counts = rec.close()
        assert latest_recording(tmp_path) == str(tmp_path / 'session.mcap')
        spin.stop()
        source.destroy_node()
    finally:
        rclpy.try_shutdown()
    # safety/state is latched: resume() may receive the current state once more (DDS timing).
    assert counts['/hardware/command'] == 61 and counts['/safety/state'] in (1, 2)
    t, got_names, q, dq, tau = read_joint_states(tmp_path / 'session.mcap')
    assert got_names == names and q.shape[1] == 3 and np.allclose(dq, 1.0)
    recording = read_mcap(tmp_path / 'session.mcap', names=names)
    assert len(recording.cmd_t) == 61   # the one sent while paused is not there
    assert np.allclose(recording.cmd_position[-1], 0.61)


@pytest.mark.ros
@pytest.mark.slow
def test_demo_runs_to_its_summary_without_a_traceback(tmp_path):
    """The README's demo command: every step reports ok/skipped/failed, nodes are stopped."""
    out = tmp_path / 'demo'
    env = dict(os.environ, ROS_HOME=str(tmp_path / 'ros_home'))
    result = subprocess.run([sys.executable, '-m', 'simreal_ros.demo', '--fast', '--out',
                             str(out)], cwd=REPO, capture_output=True, text=True,
                            timeout=900, env=env)
    text = result.stdout + result.stderr
    assert 'Traceback' not in text, text[-4000:]
    assert 'summary ----' in text, text[-4000:]
    summary = json.loads((out / 'summary.json').read_text())
    steps = {s['step']: s for s in summary['steps']}
    assert steps['bring up the graph']['status'] == 'ok', text[-4000:]
    assert steps['e-stop and reset']['status'] == 'ok', text[-4000:]
    assert steps['shut down cleanly']['status'] in ('ok', 'failed')
    for s in summary['steps']:
        assert s['status'] in ('ok', 'skipped', 'failed')
        if s['status'] == 'skipped':
            assert s['detail'].endswith('not available'), s
    assert (out / 'session.mcap').stat().st_size > 0 and (out / 'report.html').is_file()
    assert result.returncode == (1 if any(s['status'] == 'failed'
                                          for s in summary['steps']) else 0)
    left = subprocess.run(['pgrep', '-f', f'--params-file {out}'], capture_output=True,
                          text=True).stdout.split()
    assert not left, f'nodes left running: {left}'
