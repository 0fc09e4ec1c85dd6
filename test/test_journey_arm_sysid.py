"""docs/journey_arm_sysid.md, step 1, as a user types it: a copy of arm3's robot file as "my
arm", its SysID plan printed with no motion, and the total the journey quotes.

Steps 2-3 (identify, gap, export) run on arm3 in test/test_demo.py (make demo) and, through
`ros2` commands, in test/test_launch_real.py; step 4 needs a real arm.
"""
from pathlib import Path
import re
import shutil
import subprocess
import sys

REPO = Path(__file__).resolve().parents[1]
JOURNEY = REPO / 'docs' / 'journey_arm_sysid.md'


def test_the_plan_of_a_copied_arm_file_ends_with_the_total_the_journey_quotes(tmp_path):
    mine = tmp_path / 'my_arm.yaml'
    shutil.copy(REPO / 'config' / 'robots' / 'arm3.yaml', mine)
    text = JOURNEY.read_text()
    assert 'simreal sysid plan --robot my_arm.yaml' in text
    quoted = re.search(r'the last line is `([^`]+)`', ' '.join(text.split()))
    assert quoted, 'the journey quotes no plan total'
    done = subprocess.run([sys.executable, '-m', 'simreal_ros.client.cli', 'sysid', 'plan',
                           '--robot', 'my_arm.yaml'], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    for kind in ('friction', 'inertia', 'latency'):
        assert kind in done.stdout
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith(quoted.group(1)), (last, quoted.group(1))
