"""Test session set-up: DDS stays on loopback in a private domain, shared data is found by path."""
import fcntl
import os
import random
from pathlib import Path

import pytest

# Before anything imports rclpy: machines are shared, so traffic stays on this host and in a
# domain picked for this session (also inherited by every process a test starts).
os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'


def _claim_domain_id():
    """Pick a ROS domain no other test session on this machine holds (an flock per domain).

    Two sessions in one domain see each other's nodes: a second sim_robot publishing
    joint_states would make every test wrong in confusing ways.
    """
    ids = list(range(1, 101))
    random.Random(os.getpid()).shuffle(ids)
    for domain in ids:
        handle = open(f'/tmp/simreal_ros-test-domain-{domain}.lock', 'w')
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        _claim_domain_id.handle = handle  # held until this process exits
        return domain
    raise RuntimeError('no free ROS_DOMAIN_ID in 1-100 for this test session')


if 'SIMREAL_TEST_DOMAIN_ID' in os.environ:
    os.environ['ROS_DOMAIN_ID'] = os.environ['SIMREAL_TEST_DOMAIN_ID']
else:
    os.environ['ROS_DOMAIN_ID'] = str(_claim_domain_id())
os.environ.setdefault('RCUTILS_LOGGING_BUFFERED_STREAM', '0')

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / 'shared'
G1_DIR = SHARED / 'robots' / 'unitree_g1_12dof'


@pytest.fixture
def g1_dir():
    """The shared unitree G1 folder; the test is skipped, with the reason, when it is absent."""
    if not (G1_DIR / 'scene.xml').is_file():
        pytest.skip(f'shared G1 data not found at {G1_DIR} (it sits beside the repository)')
    return G1_DIR


def pytest_report_header(config):
    return [f'ROS_DOMAIN_ID={os.environ["ROS_DOMAIN_ID"]} '
            f'ROS_AUTOMATIC_DISCOVERY_RANGE={os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"]}']
