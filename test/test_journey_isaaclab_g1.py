"""docs/journey_isaaclab_g1.md as a user types it: `simreal import` of an Isaac Lab
(unitree_rl_lab) G1 29-dof export with `--driver unitree`, then the rehearsal of that very file,
with no hand edit, on the vendor's own simulator (unitree_mujoco behind unitree_bridge).

Real parts: the `simreal` command line and the rehearsal command as processes, the vendor's
simulator, unitree_bridge, safety_supervisor and policy_runner (unitree_rl_lab's ONNX policy)
on the simulator's clock, CycloneDDS and ROS on loopback. The walk is short (2 s of simulated
time; the 20 s walk is bench/vendor_rehearsal.py). The export and the model are the user's own
files here: the G1 29-dof beside the repository.
"""
import json
import os
from pathlib import Path
import signal
import subprocess
import sys

import pytest
import yaml

from simreal_ros.client.rig import REPO, loopback_udp_env, process_env

VENDOR = REPO.parent / 'shared' / 'vendor' / 'unitree_mujoco_simulate_python'
G1_29 = REPO.parent / 'shared' / 'robots' / 'unitree_g1_29dof'


@pytest.fixture(scope='module')
def export():
    if not (G1_29 / 'policy' / 'deploy.yaml').is_file():
        pytest.skip(f'the G1 29-dof export is not beside the repository ({G1_29})')
    return G1_29 / 'policy' / 'deploy.yaml', G1_29 / 'scene_29dof.xml'


def run(args, timeout=120, env=None):
    """Run `python -m args` in a session of its own; on timeout, end it and what it started."""
    proc = subprocess.Popen([sys.executable, '-m'] + args, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO, env=process_env(env),
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f'{args[0]} did not finish within {timeout} s: {err[-2000:]}')
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def imported(export, tmp_path):
    deploy, model = export
    out = tmp_path / 'my_g1.yaml'
    done = run(['simreal_ros.client.cli', 'import', str(deploy), '--format', 'unitree_rl_lab',
                '--model', str(model), '--driver', 'unitree', '-o', str(out)])
    assert done.returncode == 0, done.stderr + done.stdout
    assert f'wrote {out}' in done.stdout
    return out, done.stdout


def test_the_import_writes_a_bridge_section_for_the_robot_to_edit(export, tmp_path):
    out, stdout = imported(export, tmp_path)
    bridge = yaml.safe_load(out.read_text())['/**/unitree_bridge']['ros__parameters']
    assert bridge['unitree'] == {'peer': 'robot', 'domain_id': 0, 'network_interface': 'eth0'}
    assert bridge['motor_indices'] == list(range(29)) and bridge['interface'] == 'unitree_hg'
    # The one value the user must edit is said at the import, and in the file.
    assert 'edit network_interface' in stdout
    assert 'EDIT network_interface' in ' '.join(out.read_text().replace('#', ' ').split())


def test_a_file_written_for_the_robot_is_refused_by_the_rehearsal_with_the_flag_to_use(
        export, tmp_path):
    out, _ = imported(export, tmp_path)
    done = run(['simreal_ros.client.rehearsal', '--robot', str(out)], timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert str(out) in done.stderr and "unitree.peer is 'robot'" in done.stderr
    assert '--simulator-peer' in done.stderr
    # A file with no unitree_bridge section at all: named, with the import flag to use.
    text = out.read_text()
    bare = tmp_path / 'bare.yaml'
    bare.write_text(text[:text.index('/**/unitree_bridge:')])
    done = run(['simreal_ros.client.rehearsal', '--robot', str(bare), '--simulator-peer'],
               timeout=60)
    assert done.returncode == 2 and '--driver unitree' in done.stderr, done.stderr


@pytest.mark.ros
@pytest.mark.timeout(900)
def test_the_imported_file_rehearses_on_the_vendor_simulator_with_no_hand_edit(
        export, tmp_path):
    if not (VENDOR / 'unitree_sdk2py_bridge.py').is_file():
        pytest.skip(f'the vendor simulator is not beside the repository ({VENDOR})')
    for module in ('unitree_sdk2py', 'pygame', 'cyclonedds', 'mujoco'):
        pytest.importorskip(module, reason=f'{module}: make setup installs it')
    out, _ = imported(export, tmp_path)
    before = out.read_text()
    done = run(['simreal_ros.client.rehearsal', '--robot', str(out), '--simulator-peer',
                '--walk-s', '2', '--rtf', '0.25'], timeout=840, env=loopback_udp_env())
    print(done.stdout[-4000:], done.stderr[-4000:])
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.returncode == 0, summary.get('error') or summary
    assert out.read_text() == before          # the file is rehearsed as it was written
    # The gantry sequence of docs/real_robot.md, in order, then the walk.
    for step in ('1/5', '2/5', '3/5', '4/5', '5/5'):
        assert step in done.stdout
    g = summary['gantry']
    assert g['hanging'] <= g['go_default'] <= g['lowered'] <= g['enabled'] <= g['released']
    # The flag made the bridge take the simulator's crc-less states, counted, none rejected.
    bridge = summary['bridge']
    assert bridge['peer'] == 'simulator'
    assert int(bridge['lowstate']) > 0 and int(bridge['lowstate_bad_crc']) == 0
    assert int(bridge['lowcmd_sent']) > 0
    assert not summary['fell'] and summary['sim_s'] >= 2.0
    assert summary['forward_m'] > 0.3, summary
    assert summary['safety']['estop'] is False
    assert Path(summary['robot']) == out or summary['robot'] == str(out)
