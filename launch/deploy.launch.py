"""Bring up the deployment graph: sim_robot (or your driver), safety_supervisor, policy_runner.

    ros2 launch simreal_ros deploy.launch.py                        # arm3 in simulation
    ros2 launch simreal_ros deploy.launch.py robot:=g1_12dof
    ros2 launch simreal_ros deploy.launch.py robot:=/path/my_robot.yaml use_sim:=false
    ros2 launch simreal_ros deploy.launch.py sysid:=true            # + SysID nodes, sim_bridge (live gap)
    ros2 launch simreal_ros deploy.launch.py policy:=/path/policy.onnx namespace:=left_arm
    ros2 launch simreal_ros deploy.launch.py rviz:=true urdf:=/path/my_robot.urdf

The nodes, their parameter files and remaps come from `simreal_ros.graph.build_graph`, the
same description `simreal up` uses (pip-installed path, no ros2cli needed), so both start the
same processes with the same parameters. Nothing but safety_supervisor publishes
`hardware/command`. E-stop: `ros2 service call /safety/estop std_srvs/srv/Trigger` (or
`simreal estop`).
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, ExecuteProcess, LogInfo, OpaqueFunction
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from simreal_ros.core.config import ConfigError
from simreal_ros.graph import build_graph, rviz_config, write_overlay

ARGUMENTS = (
    ('robot', 'arm3', 'robot config name (config/robots/<name>.yaml) or parameter file path'),
    ('policy', '', 'ONNX policy path; empty = policy_runner policy_path in the robot file'),
    ('use_sim', 'true', 'start sim_robot (the embedded MuJoCo robot); false on hardware'),
    ('driver', '', "'unitree': start unitree_bridge (rt/lowcmd, rt/lowstate); with use_sim, "
                   'sim_robot plays the Unitree robot over loopback'),
    ('sysid', 'false', 'start friction_id, inertia_id, latency_id and sim_bridge (the '
                       'identified model and its shadow: the live reality gap that gates '
                       'promotion)'),
    ('use_sim_time', 'false', 'all nodes on /clock (sim_robot publishes it)'),
    ('namespace', '', 'namespace of every node (several robots on one DDS domain)'),
    ('rviz', 'false', 'start rviz2 with config/monitor.rviz'),
    ('urdf', '', 'URDF file: also start robot_state_publisher (the robot model in rviz)'),
    ('enclaves', '', 'SROS2: each node runs in the enclave <enclaves>/<node name> of '
                     'ROS_SECURITY_KEYSTORE (docs/security.md); empty = no --enclave'),
)


def _truth(context, name):
    value = LaunchConfiguration(name).perform(context).strip().lower()
    if value not in ('true', 'false', '1', '0', 'yes', 'no'):
        raise RuntimeError(f'launch argument {name}:={value!r}: expected true or false')
    return value in ('true', '1', 'yes')


def _graph_actions(context):
    try:
        graph = build_graph(
            LaunchConfiguration('robot').perform(context),
            policy=LaunchConfiguration('policy').perform(context),
            use_sim=_truth(context, 'use_sim'), sysid=_truth(context, 'sysid'),
            use_sim_time=_truth(context, 'use_sim_time'),
            namespace=LaunchConfiguration('namespace').perform(context),
            driver=LaunchConfiguration('driver').perform(context).strip())
    except ConfigError as exc:
        # A config mistake is a sentence for the operator, not a traceback.
        raise RuntimeError(f'deploy.launch.py: {exc}') from None
    write_overlay(graph)
    actions = [LogInfo(msg=line) for line in graph.describe()]
    urdf = LaunchConfiguration('urdf').perform(context)
    if urdf:
        try:
            with open(urdf) as f:
                description = f.read()
        except OSError as exc:
            raise RuntimeError(f'deploy.launch.py: urdf:={urdf}: {exc.strerror}') from None
        actions.append(Node(
            package='robot_state_publisher', executable='robot_state_publisher',
            namespace=graph.namespace or None, output='log',
            parameters=[{'robot_description': description}]))
    enclaves = LaunchConfiguration('enclaves').perform(context).strip().rstrip('/')
    if enclaves and not enclaves.startswith('/'):
        raise RuntimeError(f'deploy.launch.py: enclaves:={enclaves}: an enclave path starts '
                           "with '/' (e.g. /simreal)")
    for spec in graph.nodes:
        extra = ({'ros_arguments': ['--enclave', f'{enclaves}/{spec.name}']} if enclaves
                 else {})
        actions.append(Node(
            package='simreal_ros', executable=spec.executable, name=spec.name,
            namespace=graph.namespace or None, parameters=list(spec.params_files),
            remappings=list(spec.remaps), output='screen', emulate_tty=True, **extra))
    return actions


def generate_launch_description():
    rviz = ExecuteProcess(cmd=['rviz2', '-d', str(rviz_config())], output='log',
                          condition=IfCondition(LaunchConfiguration('rviz')))
    return LaunchDescription(
        [DeclareLaunchArgument(name, default_value=default, description=text)
         for name, default, text in ARGUMENTS]
        + [OpaqueFunction(function=_graph_actions), rviz])
