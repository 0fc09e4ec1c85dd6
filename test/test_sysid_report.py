"""The SysID report a team shares: drawn from real SysID results (arm3's estimators on its
MuJoCo plant) and sim_bridge's gap, rendered in headless Chromium: no console error, every
image loads, the parameter table present, and a screenshot to look at."""
import os
import re

import numpy as np
import pytest

from browser import check_page, console_errors, screenshot
from simreal_ros.client.sysid_report import write_report
from simreal_ros.core.bridge import BridgeSession, JointParams
from simreal_ros.core.bridge.params import bridge_parameters
from simreal_ros.core.bridge.recording import read_mcap as read_bridge_mcap
from simreal_ros.core.bridge.session import write_traces
from simreal_ros.core.config import load_node_params
from simreal_ros.core.sysid import NominalModel
from simreal_ros.core.sysid.session import SysidSession
from test_sysid_core import CONFIG, MODEL, NAMES, make_plant, short, truth
from test_sysid_repeat import drive

JOINTS = ['shoulder_yaw', 'shoulder_pitch']


def _run(kind, sim, nominal, results_dir):
    """One SysID run of `kind` over JOINTS on the arm3 plant, as the node runs it (a fresh
    plant per joint, from the zero pose, as test_sysid_repeat drives it); its result."""
    out = {'robot': 'arm3', 'experiment': kind, 'results': [], 'failures': []}
    for joint in JOINTS:
        plant = make_plant(sim, truth(sim))
        session = SysidSession(kind, short(kind), nominal, 'arm3', [joint], np.zeros(3),
                               results_dir)
        drive(plant, session)()
        out['results'] += session.results
        out['failures'] += session.failures
    return out


@pytest.fixture(scope='module')
def sysid_runs(tmp_path_factory):
    """friction, inertia, latency on two arm3 joints, and the gap of the identified model."""
    folder = tmp_path_factory.mktemp('sysid')
    sim = load_node_params(CONFIG, 'sim_robot')
    nominal = NominalModel(MODEL, NAMES)
    runs = [_run(kind, sim, nominal, str(folder)) for kind in
            ('friction', 'inertia', 'latency')]
    bridge = load_node_params(CONFIG, 'sim_bridge')
    session = BridgeSession.from_params(bridge, os.path.dirname(CONFIG))
    values = bridge_parameters(runs)
    data = {'damping': [], 'frictionloss': [], 'armature': []}
    for name in NAMES:
        for key in data:
            data[key].append(values.get(f'joints.{name}.{key}', 0.0))
    data['latency_s'] = values.get('latency_s', 0.0)
    params = JointParams.from_mapping(data, NAMES)
    mcap = runs[1]['results'][0]['data_file']
    rec = read_bridge_mcap(mcap, NAMES)
    report = session.evaluate(rec, params, name=mcap)
    gap = report.to_dict()
    gap['traces'] = write_traces(str(folder / 'export'), rec, report, NAMES, mcap)
    return runs, gap, folder


def test_every_run_carries_its_fit_curve_and_nominal(sysid_runs):
    runs, _, _ = sysid_runs
    for run in runs:
        assert not run['failures'], run['failures']
        curves = [r['fit_curve'] for r in run['results'] if 'fit_curve' in r]
        assert len(curves) == len(JOINTS), run['experiment']
        assert all('error' not in c for c in curves), curves
        assert all(r['robot_time_s'] > 1.0 and 'nominal' in r for r in run['results'])
    friction = runs[0]['results'][0]['fit_curve']
    # Two speeds per direction (short settings): each speed's mean sits near the fitted line.
    assert len(friction['speed']) == 4
    assert max(abs(m) for m in friction['misfit']) < 0.2 * friction['coulomb']


@pytest.mark.browser
def test_report_renders_in_chromium(sysid_runs, tmp_path):
    runs, gap, _ = sysid_runs
    exports = {'mjcf': '/tmp/x/arm3_identified.xml', 'values': '/tmp/x/identified_params.yaml'}
    # one armature as a heavy link leaves it (+-40 %, 8 % of the inertia): its statement shows
    import copy
    from simreal_ros.core.sysid.records import precision_note
    runs = copy.deepcopy(runs)
    wide = next(r for r in runs[1]['results'] if r['parameter'] == 'armature')
    wide['interval'] = [0.6 * wide['value'], 1.4 * wide['value']]
    precision_note(wide, link_inertia=11.5 * wide['value'])
    path = write_report(str(tmp_path / 'report'), 'arm3', runs, gap=gap, exports=exports)
    dom, probe, stderr = check_page(path, str(tmp_path))
    notes = re.search(r'<ul id="precision">(.*?)</ul>', dom, re.S)
    assert notes and f"{wide['joint']} armature" in notes.group(1)
    assert 'the armature is 8.0% of this joint' in notes.group(1)
    assert probe['errors'] == [], probe['errors']
    assert console_errors(stderr) == []
    ids = sorted(i['id'] for i in probe['images'])
    assert ids == ['friction-plot', 'gap-plot', 'inertia-plot', 'latency-plot'], ids
    assert all(i['complete'] and i['width'] > 300 for i in probe['images']), probe['images']
    table = re.search(r'<table id="parameters">(.*?)</table>', dom, re.S)
    assert table, 'no parameter table'
    for joint in JOINTS:
        assert joint in table.group(1)
    for parameter in ('coulomb_friction', 'viscous_damping', 'armature', 'latency'):
        assert parameter in table.group(1)
    assert 'robot-time' in dom and 'href="summary.json"' in dom
    assert os.path.isfile(tmp_path / 'report' / 'summary.json')
    # The raw facts stay in summary.json: no JSON dump in the page.
    assert '"fit_curve"' not in dom and '<pre' not in dom.replace(
        '<pre id="simreal-probe-result"', '')
    png = screenshot(path, str(tmp_path / 'report.png'))
    keep = os.environ.get('SIMREAL_REPORT_SCREENSHOT')
    if keep:   # for a person to look at (the file viewer), e.g. /tmp/sysid_report.png
        import shutil
        shutil.copy(png, keep)


@pytest.mark.browser
def test_a_broken_image_is_caught(sysid_runs, tmp_path):
    """The check itself: a page whose image does not load fails it."""
    runs, gap, _ = sysid_runs
    path = write_report(str(tmp_path / 'report'), 'arm3', runs, gap=gap)
    with open(path) as f:
        page = f.read()
    page = re.sub(r'src="data:image/png;base64,[^"]{40}', 'src="data:image/png;base64,AAAA',
                  page, count=1)
    with open(path, 'w') as f:
        f.write(page)
    _, probe, _ = check_page(path, str(tmp_path))
    assert [i for i in probe['images'] if i['width'] == 0]
    assert any('failed to load' in e for e in probe['errors']), probe['errors']


def test_a_report_without_sim_bridge_says_why(sysid_runs, tmp_path):
    runs, _, _ = sysid_runs
    path = write_report(str(tmp_path), 'arm3', runs, gap=None, exports=None)
    with open(path) as f:
        page = f.read()
    assert 'No gap evaluated: sim_bridge was not on the graph' in page
    assert 'gap-plot' not in page and 'id="parameters"' in page
    assert np.isfinite(runs[0]['results'][0]['value'])
