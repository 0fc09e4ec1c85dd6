"""ament_python package simreal_ros: builds with colcon and installs with pip."""
from glob import glob
import os

from setuptools import find_packages, setup

package_name = 'simreal_ros'

# One console script per node, named after the node (ros2 run simreal_ros <node>).
NODES = [
    'sim_robot',
    'safety_supervisor',
    'policy_runner',
    'friction_id',
    'inertia_id',
    'latency_id',
    'sim_bridge',
    'unitree_bridge',
    'status_markers',
]


def tree(src):
    """Return data_files entries that install folder `src` under share/simreal_ros/."""
    entries = {}
    for path in glob(os.path.join(src, '**', '*'), recursive=True):
        if os.path.isfile(path):
            dest = os.path.join('share', package_name, os.path.dirname(path))
            entries.setdefault(dest, []).append(path)
    return sorted(entries.items())


setup(
    name=package_name,
    version='0.1.0',
    packages=find_packages(exclude=['test', 'test.*', 'bench']),
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/' + package_name]),
        ('share/' + package_name, ['package.xml']),
    ] + tree('launch') + tree('config') + tree('models'),
    # mujoco[sysid]: sim_bridge's refinement uses MuJoCo's own sysid toolbox (and matplotlib);
    # mcap: recordings; onnx: the demo's generated stand-in policy for the embedded arm.
    install_requires=['setuptools', 'numpy', 'scipy', 'pyyaml', 'mujoco[sysid]', 'onnxruntime',
                      'onnx', 'cma', 'mcap', 'mcap-ros2-support',
                      # unitree_bridge and sim_robot's Unitree interface: the robot's DDS
                      'cyclonedds>=11,<12'],
    extras_require={
        'test': ['pytest', 'hypothesis', 'onnx'],
    },
    zip_safe=True,
    maintainer='simreal_ros maintainers',
    maintainer_email='maintainers@simreal-ros.invalid',
    description='Sim-to-real deployment for learned robot policies: ONNX runner, safety '
                'supervisor, system identification, MuJoCo reality-gap bridge.',
    license='Apache-2.0',
    tests_require=['pytest'],
    entry_points={
        'console_scripts': [
            f'{node} = {package_name}.nodes.{node}:main' for node in NODES
        ] + ['simreal = simreal_ros.client.cli:main'],
    },
)
