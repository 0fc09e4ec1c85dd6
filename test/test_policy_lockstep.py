"""The ROS path (sim_robot, policy_runner and safety_supervisor processes, lockstep) reproduces
the reference loop, with the supervisor at stage 1.00 in the path and without it."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

pytestmark = pytest.mark.ros


@pytest.mark.parametrize('supervisor', ['on', 'off'])
def test_g1_lockstep_over_dds_matches_reference_actions(g1_dir, supervisor):
    steps = 150
    proc = subprocess.run([sys.executable, str(REPO / 'bench' / 'g1_sim2sim.py'), '--mode',
                           'lockstep', '--steps', str(steps), '--supervisor', supervisor],
                          capture_output=True, text=True,
                          timeout=240, cwd=REPO, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary['steps'] == steps
    assert summary['stamps_match_reference'], summary
    assert summary['max_action_err'] <= 1e-4, summary
    assert not summary['fell']
    assert summary['supervisor'] == (supervisor == 'on')
    if supervisor == 'on':   # forwarded unchanged: nothing clipped, no safe mode
        state = summary['supervisor_state']
        assert not state['estop'] and state['output'] == 'forwarding', state
        assert not any(state['clips'].values()), state
