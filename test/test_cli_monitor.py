"""`simreal monitor`'s arithmetic and markers (no ROS graph needed)."""
import pytest
import yaml

from conftest import REPO
from simreal_ros.core.config import load_node_params
from simreal_ros.core.limit_usage import limit_usage
from simreal_ros.nodes.status_markers import markers

PARAMS = load_node_params(REPO / 'config' / 'robots' / 'arm3.yaml', 'safety_supervisor')


def test_limit_usage_is_the_fraction_of_each_scaled_limit():
    names = list(PARAMS['joint_names'])
    lo, hi = PARAMS['position_lower'][0], PARAMS['position_upper'][0]
    vmax, tmax = PARAMS['velocity_limit'][0], PARAMS['torque_limit'][0]
    stage = 0.5
    q = (lo + hi) / 2 + 0.25 * (hi - lo) / 2
    use = limit_usage(PARAMS, stage, names[:1], [q], [0.4 * vmax * stage],
                      [-0.9 * tmax * stage])
    assert use[names[0]] == pytest.approx({'position': 0.25, 'velocity': 0.4, 'torque': 0.9},
                                          abs=1e-3)
    # Joints the supervisor does not know are left out, not guessed.
    assert limit_usage(PARAMS, 1.0, ['wheel'], [0.0], [0.0], [0.0]) == {}


def test_markers_say_stage_and_estop_and_colour_the_worst_limit():
    names = list(PARAMS['joint_names'])
    use = limit_usage(PARAMS, 1.0, names, [0.0] * 3, [0.0] * 3,
                      [0.0, 0.0, PARAMS['torque_limit'][2]])
    state = {'stage': {'stage': 1.0, 'highest': 1.0}, 'estop': True,
             'estop_cause': 'operator: safety/estop service', 'output': 'safe', 'mode': 'policy'}
    arr = markers(state, use)
    assert 'E-STOP: operator' in arr.markers[0].text and 'stage 1.0' in arr.markers[0].text
    bars = [m for m in arr.markers if m.ns == 'simreal_limits']
    assert len(bars) == 3
    elbow = bars[sorted(use).index(names[2])]
    assert elbow.color.r > 0.8 and elbow.color.g < 0.2   # torque at 100 %: red
    assert markers(None, {}).markers[0].text == 'safety_supervisor: no state'


def test_rviz_and_rqt_files_point_at_the_topics_the_package_publishes():
    import json

    import yaml
    rviz = yaml.safe_load((REPO / 'config' / 'monitor.rviz').read_text())
    displays = {d['Class']: d for d in rviz['Visualization Manager']['Displays']}
    assert displays['rviz_default_plugins/MarkerArray']['Topic']['Value'] == '/monitor/markers'
    perspective = json.loads((REPO / 'config' / 'simreal.perspective').read_text())
    plugins = perspective['groups']['pluginmanager']['keys']['running-plugins']['repr']
    # rqt_robot_monitor reads /diagnostics_agg (with diagnostic_aggregator), rqt_runtime_monitor
    # reads /diagnostics itself (without it).
    for plugin in ('rqt_robot_monitor', 'rqt_runtime_monitor', 'rqt_plot', 'rqt_service_caller'):
        assert plugin in plugins
    text = (REPO / 'config' / 'simreal.perspective').read_text()
    for topic in ('/policy/command/position', '/hardware/command/position',
                  '/joint_states/position', '/joint_states/effort'):
        assert topic in text


def test_monitoring_files_move_every_topic_into_the_namespace():
    from simreal_ros.deploy import monitor_files as monitor
    rviz = (REPO / 'config' / 'monitor.rviz').read_text()
    perspective = (REPO / 'config' / 'simreal.perspective').read_text()
    assert monitor.rviz_topics(monitor.rviz_in('', rviz)) == monitor.rviz_topics(rviz)
    assert monitor.rviz_topics(monitor.rviz_in('/lab/left', rviz)) == {
        '/lab/left' + t for t in monitor.rviz_topics(rviz)}
    assert monitor.perspective_topics(perspective) == {
        '/policy/command', '/hardware/command', '/joint_states'}
    assert monitor.perspective_topics(monitor.perspective_in('left', perspective)) == {
        '/left/policy/command', '/left/hardware/command', '/left/joint_states'}
    # The rest of the files is kept: the plugins and the rviz displays.
    assert 'rqt_runtime_monitor' in monitor.perspective_in('left', perspective)
    assert len(yaml.safe_load(monitor.rviz_in('left', rviz))['Visualization Manager']
               ['Displays']) == len(yaml.safe_load(rviz)['Visualization Manager']['Displays'])


def test_analyzers_group_per_robot_then_per_node_and_match_both_spellings():
    from simreal_ros.deploy import monitor_files as monitor
    params = monitor.analyzers({'/left': ['sim_robot', 'safety_supervisor', 'status_markers'],
                                '': ['safety_supervisor']})
    top = params['analyzers']['ros__parameters']
    assert top['left']['type'] == 'diagnostic_aggregator/AnalyzerGroup'
    prefixes = monitor.analyzer_prefixes(params)
    assert set(prefixes) == {('left', 'sim_robot'), ('left', 'safety_supervisor'),
                             ('robot', 'safety_supervisor')}   # status_markers reports nothing
    left = prefixes[('left', 'safety_supervisor')]
    for name in ('left/safety_supervisor', '/left/safety_supervisor'):   # status, heartbeat
        assert name.startswith(tuple(left))
    assert not 'right/safety_supervisor'.startswith(tuple(left))
    assert not 'left/safety_supervisor'.startswith(tuple(prefixes[('robot', 'safety_supervisor')]))


LIVE = {'status': 'ERROR', 'identified': True, 'floor_source': 'offline: x.mcap', 'window_s': 1.5,
        'reason': 'elbow_pitch: gap 41.00 x the noise floor',
        'joints': {'shoulder_yaw': {'status': 'OK', 'gap_over_floor': 1.2, 'nrmse_position': 0.01,
                                    'nrmse_velocity': 0.02, 'motion_rad_s': 0.1},
                   'elbow_pitch': {'status': 'ERROR', 'gap_over_floor': 41.0,
                                   'nrmse_position': 0.3, 'nrmse_velocity': 0.5,
                                   'motion_rad_s': 0.2},
                   'shoulder_pitch': {'status': 'unknown'}},
        'offline': {'passed': True, 'gap': 0.0012, 'threshold': 0.15, 'held_out': True,
                    'recording': 'latency.mcap'}}


def test_live_gap_markers_name_each_joint_with_its_gap_and_colour_its_status():
    arr = markers(None, {}, live_gap=LIVE)
    gaps = {m.text.split(':')[0]: m for m in arr.markers if m.ns == 'simreal_live_gap'}
    assert set(gaps) == set(LIVE['joints'])
    assert 'live gap 41.0x floor ERROR' in gaps['elbow_pitch'].text
    assert gaps['elbow_pitch'].color.r > 0.8 and gaps['elbow_pitch'].color.g < 0.2
    assert gaps['shoulder_yaw'].color.g > 0.7                     # OK: green
    assert gaps['shoulder_pitch'].text.endswith('live gap unknown')
    assert not [m for m in markers(None, {}).markers if m.ns == 'simreal_live_gap']


def test_gap_live_lines_per_joint():
    from simreal_ros.client.live_gap import format_live_gap
    lines = format_live_gap(LIVE)
    assert lines[0].startswith('live gap ERROR (identified model')
    row = next(x for x in lines if x.strip().startswith('elbow_pitch'))
    assert '41.00 x floor' in row and 'ERROR' in row and 'NRMSE position 30.00 %' in row
    assert any(x.strip() == 'shoulder_pitch     unknown' for x in lines)
    assert 'offline gap 0.12 % (PASS at 15 %, held-out latency.mcap)' in lines[-1]
    # issue 41: which commands the shadow replayed, and why not the applied ones
    doc = dict(LIVE, command_source='hardware/command',
               command_source_reason='no driver/applied_command received')
    assert ('  commands replayed: hardware/command (no driver/applied_command received)'
            in format_live_gap(doc))
