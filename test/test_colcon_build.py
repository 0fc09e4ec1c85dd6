"""The ROS-native path: colcon builds the package into an install space ros2 run/launch can use."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rosproc import REPO, wait_for

pytestmark = pytest.mark.ros_native


@pytest.fixture
def install(colcon_install):
    """Return the package prefix in the session's colcon install (shared with the launch tests)."""
    return colcon_install / 'simreal_ros'


def setup_nodes():
    """Return setup.py's NODES list (one console script per node)."""
    import ast
    tree = ast.parse(Path(REPO, 'setup.py').read_text())
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and getattr(stmt.targets[0], 'id', '') == 'NODES':
            return ast.literal_eval(stmt.value)
    raise AssertionError('setup.py has no NODES list')


def test_executables_are_where_ros2_run_looks(install):
    nodes = setup_nodes()
    assert 'sim_robot' in nodes
    # The operator CLI too: `ros2 run simreal_ros simreal` (docs/journey_ros.md, step 3).
    for node in nodes + ['simreal']:
        exe = install / 'lib' / 'simreal_ros' / node
        assert exe.is_file() and os.access(exe, os.X_OK), f'{exe} missing'


def test_share_holds_package_xml_launch_config_and_the_ament_index_marker(install):
    share = install / 'share' / 'simreal_ros'
    assert (share / 'package.xml').is_file()
    assert (share / 'config' / 'robots' / 'arm3.yaml').is_file()
    assert (share / 'models' / 'arm3' / 'arm3.xml').is_file()
    # rviz and rqt from the installed share folder (docs/journey_ros.md, step 5).
    assert (share / 'config' / 'monitor.rviz').is_file()
    assert (share / 'config' / 'simreal.perspective').is_file()
    launch_files = sorted(p.name for p in (share / 'launch').glob('*.launch.py'))
    assert launch_files == sorted(p.name for p in Path(REPO, 'launch').glob('*.launch.py'))
    assert (install / 'share' / 'ament_index' / 'resource_index' / 'packages'
            / 'simreal_ros').is_file()


def test_installed_node_runs_from_the_install_space(install, tmp_path):
    """The installed sim_robot finds its model through the ament index, not the source tree."""
    pyver = f'python{sys.version_info.major}.{sys.version_info.minor}'
    site = install / 'lib' / pyver / 'site-packages'
    env = dict(os.environ, PYTHONPATH=f'{site}:{os.environ.get("PYTHONPATH", "")}',
               AMENT_PREFIX_PATH=f'{install}:{os.environ.get("AMENT_PREFIX_PATH", "")}',
               PYTHONUNBUFFERED='1')
    where = subprocess.run([sys.executable, '-c', 'import simreal_ros.core.config as c; '
                            'print(c.__file__); print(c.share_dir())'],
                           env=env, cwd=tmp_path, capture_output=True, text=True, check=True)
    module_file, share = where.stdout.split()
    assert module_file.startswith(str(install)), module_file
    assert share == str(install / 'share' / 'simreal_ros')
    log = tmp_path / 'sim_robot.log'
    with open(log, 'w') as out:
        proc = subprocess.Popen(
            [str(install / 'lib' / 'simreal_ros' / 'sim_robot'), '--ros-args', '--params-file',
             str(install / 'share' / 'simreal_ros' / 'config' / 'robots' / 'arm3.yaml')],
            env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: 'hidden plant truth applied' in log.read_text()
                     or proc.poll() is not None, 60, what='sim_robot start-up line')
            assert proc.poll() is None, log.read_text()
        finally:
            proc.send_signal(2)
            proc.wait(timeout=20)
