"""status_markers: the operator's rviz markers as a node of the graph (stage, e-stop, limit use).

    ros2 launch simreal_ros deploy.launch.py rviz:=true namespace:=left   # started with rviz
    simreal -n left up --rviz

The same markers as `simreal monitor` (`simreal_ros.monitor`: one status line, one bar per
joint whose length is the largest fraction of a limit in use), published on the relative topic
`monitor/markers`, so under a namespace it is `/<namespace>/monitor/markers` and two robots'
markers never mix. Reads `safety/state` (latched), `joint_states` and, where sim_bridge shadows
the robot, its per-joint live gap (`sim_bridge/live_gap`, latched); the limits come from the
robot file's safety_supervisor section (`robot_file`). It only displays: it publishes nothing
a robot obeys.
"""
import json

from sensor_msgs.msg import JointState
from std_msgs.msg import String
from visualization_msgs.msg import MarkerArray
from rclpy.node import Node

from simreal_ros import monitor
from simreal_ros.core.config import ConfigError, load_node_params
from simreal_ros.nodes.common import LATCHED_QOS, SENSOR_SUB_QOS, declare, run

NODE_NAME = 'status_markers'


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
            usage = monitor.limit_usage(self.params, self.state['stage']['stage'], list(j.name),
                                        list(j.position), list(j.velocity), list(j.effort))
        self.pub.publish(monitor.markers(self.state, usage, frame=self.frame,
                                         stamp=self.get_clock().now().to_msg(),
                                         live_gap=self.live_gap))
        self.sent += 1


def main(args=None):
    run(StatusMarkers, args)


if __name__ == '__main__':
    main()
