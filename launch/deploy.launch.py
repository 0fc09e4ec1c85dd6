"""Bring up the deployment graph: sim_robot (or your driver), safety_supervisor, policy_runner.

    ros2 launch simreal_ros deploy.launch.py                        # arm3 in simulation
    ros2 launch simreal_ros deploy.launch.py robot:=g1_12dof
    ros2 launch simreal_ros deploy.launch.py robot:=/path/my_robot.yaml use_sim:=false
    ros2 launch simreal_ros deploy.launch.py sysid:=true            # + SysID nodes, sim_bridge (live gap)
    ros2 launch simreal_ros deploy.launch.py policy:=/path/policy.onnx namespace:=left_arm
    ros2 launch simreal_ros deploy.launch.py rviz:=true urdf:=/path/my_robot.urdf
    ros2 launch simreal_ros deploy.launch.py rviz:=true namespace:=left   # any namespace

rviz:=true starts status_markers (the markers of `simreal monitor`, on <namespace>/monitor/markers)
and rviz2 with a copy of config/monitor.rviz whose topics are in the namespace; the same
folder gets simreal.perspective (rqt) and diagnostic_analyzers.yaml (diagnostic_aggregator) for
this robot. Without an rviz2 install the markers still run, and the log says so.

The nodes, their parameter files and remaps come from `simreal_ros.deploy.graph.build_graph`, the
same description `simreal up` uses (pip-installed path, no ros2cli needed), so both start the
same processes with the same parameters. Nothing but safety_supervisor publishes
`hardware/command`. E-stop: `ros2 service call /safety/estop std_srvs/srv/Trigger` (or
`simreal estop`).
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, LogInfo, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from simreal_ros.core.config import ConfigError
from simreal_ros.deploy.graph import build_graph, monitor_configs, rviz_available, write_overlay

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
    ('rviz', 'false', 'start status_markers and rviz2 (config/monitor.rviz, its topics in the '
                      'namespace)'),
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
    rviz = _truth(context, 'rviz')
    try:
        graph = build_graph(
            LaunchConfiguration('robot').perform(context),
            policy=LaunchConfiguration('policy').perform(context),
            use_sim=_truth(context, 'use_sim'), sysid=_truth(context, 'sysid'),
            use_sim_time=_truth(context, 'use_sim_time'),
            namespace=LaunchConfiguration('namespace').perform(context),
            driver=LaunchConfiguration('driver').perform(context).strip(), markers=rviz)
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
    if rviz:
        files = monitor_configs(graph)
        actions.append(LogInfo(msg=f'monitoring files for this robot: rviz {files["rviz"]}, '
                               f'rqt {files["perspective"]}, diagnostic_aggregator '
                               f'{files["analyzers"]}'))
        if rviz_available():
            actions.append(Node(package='rviz2', executable='rviz2', name='rviz2',
                                namespace=graph.namespace or None, output='log',
                                arguments=['-d', str(files['rviz'])]))
        else:
            actions.append(LogInfo(msg='rviz:=true: rviz2 is not installed here (a ROS 2 '
                                   'desktop install has it); status_markers runs, rviz2 does '
                                   'not'))
    return actions


def generate_launch_description():
    return LaunchDescription(
        [DeclareLaunchArgument(name, default_value=default, description=text)
         for name, default, text in ARGUMENTS]
        + [OpaqueFunction(function=_graph_actions)])
