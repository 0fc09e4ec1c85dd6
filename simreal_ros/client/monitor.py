"""`simreal monitor`: the status_markers node's rviz markers, published from the CLI.

    simreal monitor --robot arm3            # publishes monitor/markers at 5 Hz
    rviz2 -d config/monitor.rviz

Reads `safety/state`, `joint_states` and `sim_bridge/live_gap`; the markers are
`nodes/status_markers.markers`, the arithmetic `core/limit_usage`.
"""
import json
import threading
import time


def run(ros, robot, rate_hz=5.0, duration=None):
    """Publish monitor/markers until Ctrl-C (or `duration` s); return the messages sent."""
    from sensor_msgs.msg import JointState
    from std_msgs.msg import String
    from visualization_msgs.msg import MarkerArray
    from simreal_ros.core.config import load_node_params, robot_config_path
    from simreal_ros.nodes.common import LATCHED_QOS, SENSOR_SUB_QOS
    from simreal_ros.client.ros import join_name as _join
    from simreal_ros.core.limit_usage import limit_usage
    from simreal_ros.nodes.status_markers import markers
    params = load_node_params(robot_config_path(robot), 'safety_supervisor')
    latest = {'state': None, 'joints': None, 'gap': None}
    lock = threading.Lock()

    def on_state(msg):
        with lock:
            latest['state'] = json.loads(msg.data)

    def on_joints(msg):
        with lock:
            latest['joints'] = msg

    def on_gap(msg):
        with lock:
            latest['gap'] = json.loads(msg.data)
    ros.node.create_subscription(String, _join(ros.namespace, 'safety/state'), on_state,
                                 LATCHED_QOS)
    ros.node.create_subscription(JointState, _join(ros.namespace, 'joint_states'), on_joints,
                                 SENSOR_SUB_QOS)
    ros.node.create_subscription(String, _join(ros.namespace, 'sim_bridge/live_gap'), on_gap,
                                 LATCHED_QOS)
    pub = ros.node.create_publisher(MarkerArray, _join(ros.namespace, 'monitor/markers'), 10)
    sent = 0
    end = None if duration is None else time.monotonic() + duration
    while end is None or time.monotonic() < end:
        with lock:
            state, joints, gap = latest['state'], latest['joints'], latest['gap']
        usage = {}
        if joints is not None and state is not None:
            usage = limit_usage(params, state['stage']['stage'], list(joints.name),
                                list(joints.position), list(joints.velocity),
                                list(joints.effort))
        pub.publish(markers(state, usage, stamp=ros.node.get_clock().now().to_msg(),
                            live_gap=gap))
        sent += 1
        time.sleep(1.0 / rate_hz)   # a display refresh, not synchronisation
    return sent
