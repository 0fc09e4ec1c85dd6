"""The ROS path (sim_robot and policy_runner processes, lockstep) reproduces the reference loop."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

pytestmark = pytest.mark.ros


def test_g1_lockstep_over_dds_matches_reference_actions(g1_dir):
    steps = 150
    proc = subprocess.run([sys.executable, str(REPO / 'bench' / 'g1_sim2sim.py'), '--mode',
                           'lockstep', '--steps', str(steps)], capture_output=True, text=True,
                          timeout=240, cwd=REPO, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary['steps'] == steps
    assert summary['stamps_match_reference'], summary
    assert summary['max_action_err'] <= 1e-4, summary
    assert not summary['fell']
