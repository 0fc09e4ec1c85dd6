"""What every node does before ROS starts: the executor kind and the middleware transport."""
import pytest

from simreal_ros.core.config import ConfigError
from simreal_ros.nodes.common import make_executor, prefer_udp_transport


def test_udp_transport_unless_the_user_chose_one():
    env = {}
    assert prefer_udp_transport(env) == 'UDPv4' and env['FASTDDS_BUILTIN_TRANSPORTS'] == 'UDPv4'
    env = {'FASTDDS_BUILTIN_TRANSPORTS': 'SHM'}
    assert prefer_udp_transport(env) == 'SHM'
    env = {'FASTDDS_DEFAULT_PROFILES_FILE': '/etc/robot/fastdds.xml'}
    assert prefer_udp_transport(env) is None and 'FASTDDS_BUILTIN_TRANSPORTS' not in env


def test_executor_kind_is_checked():
    with pytest.raises(ConfigError, match='executor'):
        make_executor('multi')
