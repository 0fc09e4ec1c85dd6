"""status_markers: the operator's rviz markers as a node of the graph (stage, e-stop, limit use).

    ros2 launch simreal_ros deploy.launch.py rviz:=true namespace:=left   # started with rviz
    simreal -n left up --rviz

Subscribes:
    safety/state, sim_bridge/live_gap (std_msgs/String, latched), joint_states
    (sensor_msgs/JointState)
Publishes:
    monitor/markers (visualization_msgs/MarkerArray): nothing a robot obeys
Parameters:
    robot_file (its safety_supervisor section gives the limits shown), rate_hz, frame_id.
"""
import json

from sensor_msgs.msg import JointState
from std_msgs.msg import String
from visualization_msgs.msg import Marker, MarkerArray
from rclpy.node import Node

from simreal_ros.core.limit_usage import limit_usage
from simreal_ros.core.config import ConfigError, load_node_params
from simreal_ros.nodes.common import LATCHED_QOS, SENSOR_SUB_QOS, declare, run

NODE_NAME = 'status_markers'


def _color(marker, fraction):
    marker.color.a = 1.0
    if fraction < 0.7:
        marker.color.r, marker.color.g, marker.color.b = 0.1, 0.8, 0.2
    elif fraction < 0.95:
        marker.color.r, marker.color.g, marker.color.b = 0.95, 0.7, 0.1
    else:
        marker.color.r, marker.color.g, marker.color.b = 0.9, 0.1, 0.1


GAP_COLOUR = {'OK': 0.0, 'WARN': 0.8, 'ERROR': 1.0}


def markers(state, usage, frame='world', stamp=None, live_gap=None):
    """Return a MarkerArray: a status text and one bar + label per joint, and with a live-gap
    document one text per joint: its gap over the noise floor and status."""
    out = MarkerArray()
    text = Marker(ns='simreal', id=0, type=Marker.TEXT_VIEW_FACING, action=Marker.ADD)
    text.header.frame_id = frame
    if stamp is not None:
        text.header.stamp = stamp
    text.pose.position.z = 1.2
    text.pose.orientation.w = 1.0
    text.scale.z = 0.08
    if state is None:
        text.text = 'safety_supervisor: no state'
        _color(text, 1.0)
    else:
        stage = state.get('stage', {})
        estop = f'E-STOP: {state.get("estop_cause")}' if state.get('estop') else 'e-stop clear'
        text.text = (f'stage {stage.get("stage")} (highest {stage.get("highest")}) | {estop} | '
                     f'{state.get("output")} {state.get("mode")}')
        _color(text, 1.0 if state.get('estop') else 0.0)
    out.markers.append(text)
    for j, (name, use) in enumerate(sorted(usage.items())):
        worst = max(use.values()) if use else 0.0
        bar = Marker(ns='simreal_limits', id=j, type=Marker.CUBE, action=Marker.ADD)
        bar.header = text.header
        bar.scale.x = max(min(worst, 1.5), 0.01) * 0.5
        bar.scale.y = bar.scale.z = 0.04
        bar.pose.position.x = bar.scale.x / 2.0
        bar.pose.position.z = 1.0 - 0.08 * j
        bar.pose.orientation.w = 1.0
        _color(bar, worst)
        label = Marker(ns='simreal_labels', id=j, type=Marker.TEXT_VIEW_FACING,
                       action=Marker.ADD)
        label.header = text.header
        label.pose.position.x = -0.35
        label.pose.position.z = bar.pose.position.z
        label.pose.orientation.w = 1.0
        label.scale.z = 0.04
        label.text = f'{name}: ' + ' '.join(f'{k[:3]} {v * 100:.0f}%' for k, v in use.items())
        _color(label, worst)
        out.markers += [bar, label]
    joints = (live_gap or {}).get('joints') or {}
    for j, name in enumerate(sorted(joints)):
        g = joints[name]
        gap = Marker(ns='simreal_live_gap', id=j, type=Marker.TEXT_VIEW_FACING,
                     action=Marker.ADD)
        gap.header = text.header
        gap.pose.position.x = 0.55
        gap.pose.position.z = 1.0 - 0.08 * j
        gap.pose.orientation.w = 1.0
        gap.scale.z = 0.04
        if g.get('gap_over_floor') is None or g.get('status') == 'unknown':
            gap.text = f'{name}: live gap unknown'
            _color(gap, 0.8)
        else:
            gap.text = f'{name}: live gap {g["gap_over_floor"]:.1f}x floor {g["status"]}'
            _color(gap, GAP_COLOUR.get(g['status'], 1.0))
        out.markers.append(gap)
    return out


class StatusMarkers(Node):
    NODE_NAME = NODE_NAME

    def __init__(self):
        super().__init__(NODE_NAME)
        robot_file = declare(self, 'robot_file', '', 'robot parameter file whose '
                             'safety_supervisor section gives the limits shown', read_only=True)
        rate = declare(self, 'rate_hz', 5.0, 'marker refresh rate (Hz): a display, not a '
                       'control loop', low=0.2, high=30.0, read_only=True)
        self.frame = declare(self, 'frame_id', 'world', 'frame of the markers (rviz Fixed '
                             'Frame)', read_only=True)
        if not robot_file:
            raise ConfigError('parameter robot_file is empty: the robot parameter file whose '
                              'safety_supervisor section has the limits')
        self.params = load_node_params(robot_file, 'safety_supervisor')
        self.params.setdefault('joint_names', load_node_params(robot_file, '/**')
                               .get('joint_names', []))
        missing = [k for k in ('joint_names', 'position_lower', 'position_upper',
                               'velocity_limit', 'torque_limit') if not self.params.get(k)]
        if missing:
            raise ConfigError(f'{robot_file}: safety_supervisor section lacks {missing}')
        self.state = None
        self.joints = None
        self.live_gap = None
        self.sent = 0
        self.create_subscription(String, 'safety/state', self._on_state, LATCHED_QOS)
        self.create_subscription(JointState, 'joint_states', self._on_joints, SENSOR_SUB_QOS)
        self.create_subscription(String, 'sim_bridge/live_gap', self._on_gap, LATCHED_QOS)
        self.pub = self.create_publisher(MarkerArray, 'monitor/markers', 10)
        self.create_timer(1.0 / rate, self._tick)
        self.get_logger().info(f'markers on {self.pub.topic_name} at {rate:g} Hz (frame '
                               f'{self.frame}); rviz2: Add > MarkerArray, that topic')

    def _on_state(self, msg):
        try:
            self.state = json.loads(msg.data)
        except ValueError:
            self.state = None   # shown as 'no state' rather than a stale one

    def _on_gap(self, msg):
        try:
            self.live_gap = json.loads(msg.data)
        except ValueError:
            self.live_gap = None

    def _on_joints(self, msg):
        self.joints = msg

    def _tick(self):
        usage = {}
        if self.joints is not None and self.state is not None:
            j = self.joints
            usage = limit_usage(self.params, self.state['stage']['stage'], list(j.name),
                                list(j.position), list(j.velocity), list(j.effort))
        self.pub.publish(markers(self.state, usage, frame=self.frame,
                                 stamp=self.get_clock().now().to_msg(),
                                 live_gap=self.live_gap))
        self.sent += 1


def main(args=None):
    run(StatusMarkers, args)


if __name__ == '__main__':
    main()
