"""latency_id: latency identification of the robot's joints through safety_supervisor.

    ros2 run simreal_ros latency_id --ros-args --params-file config/robots/arm3.yaml
    ros2 service call /latency_id/start std_srvs/srv/Trigger
    ros2 service call /latency_id/abort std_srvs/srv/Trigger
    ros2 topic echo /latency_id/progress
    ros2 topic echo /sysid/result --qos-durability transient_local

Before start: safety_supervisor forwards the sysid source (estop, select_sysid true, reset).
See simreal_ros.nodes.sysid_experiment for the run, simreal_ros.core.sysid for the method.
"""
from simreal_ros.nodes.common import run
from simreal_ros.nodes.sysid_experiment import SysidNode


class LatencyId(SysidNode):
    KIND = 'latency'
    NODE_NAME = 'latency_id'
    NEEDS_EFFORT = False     # positions only; effort (when present) checks saturation


def main(args=None):
    return run(LatencyId, args)


if __name__ == '__main__':
    raise SystemExit(main())
