"""`simreal sysid plan`: the G1's gantry SysID fits its limits and ten minutes of robot time,
and a robot file whose experiments would leave the SysID limits is refused before any motion."""
import json
import os

from conftest import REPO
from simreal_ros.client import cli

G1 = os.path.join(REPO, 'config', 'robots', 'g1_12dof.yaml')


def test_g1_legs_plan_inside_the_limits_within_ten_minutes(capsys):
    assert cli.main(['sysid', 'plan', '--robot', G1, '--json']) == 0
    plan = json.loads(capsys.readouterr().out)
    rows = plan['experiments']
    assert {r['kind'] for r in rows} == {'friction', 'inertia', 'latency'}
    assert len({r['joint'] for r in rows}) == 12
    assert all(r['violations'] == [] for r in rows), [r for r in rows if r['violations']]
    assert all(r['peak_speed'] <= r['velocity_limit'] for r in rows)
    assert all(r['peak_torque'] < r['torque_limit'] for r in rows)
    assert 0 < plan['total_s'] <= 600.0
    assert abs(plan['total_s'] - sum(r['duration_s'] for r in rows)) < 0.5
    # Gravity of the hanging leg from the MJCF (contacts off, base held): the hip pitch
    # carries the leg, the ankle roll almost nothing.
    peak = {(r['kind'], r['joint']): r['peak_torque'] for r in rows}
    assert peak[('friction', 'left_hip_pitch_joint')] > 20 * peak[('friction',
                                                                   'left_ankle_roll_joint')]


def test_a_plan_outside_the_limits_exits_1_and_names_it(tmp_path, capsys):
    text = open(G1).read()
    # The knee's SysID torque limit far below what holding the hanging shank takes.
    old = 'torque_limit: [40.0, 60.0, 40.0, 60.0, 20.0, 20.0, 40.0, 60.0, 40.0, 60.0, 20.0, 20.0]'
    assert old in text
    bad = tmp_path / 'g1_bad.yaml'
    bad.write_text(text.replace(old, old.replace('[40.0, 60.0, 40.0, 60.0', '[40.0, 60.0, '
                                                 '40.0, 0.5'), 1))
    assert cli.main(['sysid', 'plan', '--robot', str(bad)]) == 1
    out = capsys.readouterr()
    assert 'OUTSIDE' in out.out and 'left_knee_joint' in out.out
    assert 'do not run them' in out.err
