"""Start the embedded simulated robot alone.

    ros2 launch simreal_ros sim_robot.launch.py robot:=arm3
    ros2 launch simreal_ros sim_robot.launch.py robot:=/path/to/my_robot.yaml
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node


def _robot_params(context):
    robot = LaunchConfiguration('robot').perform(context)
    if robot.endswith(('.yaml', '.yml')) or os.sep in robot:
        path = robot
    else:
        path = os.path.join(get_package_share_directory('simreal_ros'), 'config', 'robots',
                            robot + '.yaml')
    if not os.path.isfile(path):
        raise RuntimeError(f'unknown robot {robot!r}: no parameter file {path}')
    return [Node(package='simreal_ros', executable='sim_robot', name='sim_robot',
                 namespace=LaunchConfiguration('namespace'), parameters=[path],
                 output='screen', emulate_tty=True)]


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument('robot', default_value='arm3',
                              description='robot config name (config/robots/<name>.yaml) or path'),
        DeclareLaunchArgument('namespace', default_value='', description='namespace'),
        OpaqueFunction(function=_robot_params),
    ])
