"""sim_bridge node over real DDS: parameters with ranges, ~/evaluate_gap, latched gap, ~/export."""
import json
import os
import subprocess
import sys

import mujoco
import numpy as np
import pytest
import rclpy
from rcl_interfaces.srv import SetParameters
from rclpy.parameter import Parameter
from std_msgs.msg import String
from std_srvs.srv import Trigger

from rosproc import NodeProcess, Spinner, wait_for
from simreal_ros.core.bridge.excite import multisine_run, record_run
from simreal_ros.core.bridge.params import params_in_model
from simreal_ros.core.bridge.recording import write_mcap
from simreal_ros.core.config import load_node_params
from simreal_ros.core.plant import PlantTruth, SimPlant
from simreal_ros.core.sysid import NominalModel
from simreal_ros.nodes.common import LATCHED_QOS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(REPO, 'config', 'robots', 'arm3.yaml')
MODEL = os.path.join(REPO, 'models', 'arm3', 'arm3.xml')

pytestmark = pytest.mark.ros


@pytest.fixture(scope='module')
def recording_dir(tmp_path_factory):
    sim = load_node_params(CONFIG, 'sim_robot')
    names = list(sim['joint_names'])
    plant = {k[len('plant.'):]: v for k, v in sim.items() if k.startswith('plant.')}
    truth = PlantTruth.from_mapping(plant, len(names))
    sp = SimPlant(MODEL, names, 0.001, sim['kp'], sim['kd'], truth=truth, seed=9)
    rec = record_run(sp, multisine_run(names, 0.0, [0.35, 0.3, 0.35], (0.5, 3.0), 2.5,
                                       nominal=NominalModel(MODEL, names), seed=4))
    folder = tmp_path_factory.mktemp('recordings')
    write_mcap(str(folder / 'run.mcap'), rec)
    return folder, truth, names


def _call(node, client, request, timeout=120.0):
    assert client.wait_for_service(timeout_sec=timeout), f'{client.srv_name} never appeared'
    future = client.call_async(request)
    wait_for(future.done, timeout, what=f'{client.srv_name} response')
    return future.result()


def _set(node, client, values):
    req = SetParameters.Request()
    req.parameters = [Parameter(k, value=float(v)).to_parameter_msg() for k, v in values.items()]
    return _call(node, client, req).results


def test_sim_bridge_node_gap_gate_parameters_and_export(recording_dir, tmp_path):
    folder, truth, names = recording_dir
    export_dir = tmp_path / 'export'
    proc = NodeProcess('sim_bridge', CONFIG, params={'recordings_dir': str(folder),
                                                     'export_dir': str(export_dir)})
    rclpy.init()
    node = rclpy.create_node('test_sim_bridge_client')
    gaps = []
    node.create_subscription(String, '/sim_bridge/gap', lambda m: gaps.append(json.loads(m.data)),
                             LATCHED_QOS)
    evaluate = node.create_client(Trigger, '/sim_bridge/evaluate_gap')
    export = node.create_client(Trigger, '/sim_bridge/export')
    setp = node.create_client(SetParameters, '/sim_bridge/set_parameters')
    spinner = Spinner(node)
    try:
        # A deliberately wrong model fails the gate.
        wrong = {f'joints.{j}.armature': 6 * truth.armature[i] for i, j in enumerate(names)}
        wrong.update({f'joints.{j}.frictionloss': 4 * truth.coulomb_friction[i]
                      for i, j in enumerate(names)})
        wrong['latency_s'] = 0.03
        results = _set(node, setp, wrong)
        assert all(r.successful for r in results), [r.reason for r in results]
        res = _call(node, evaluate, Trigger.Request())
        assert res.success and res.message.startswith('FAIL'), res.message
        doc = wait_for(lambda: gaps[-1] if gaps else None, 30, what='latched gap')
        assert doc['passed'] is False and doc['gap_identified'] > doc['threshold'] == 0.15
        # By default the score is on held-out data: the recording's last 30 %, never fitted.
        assert doc['held_out'] is True and 'held-out last 30 %' in res.message, res.message
        start, end = doc['recording_span_s']
        assert doc['evaluated_span_s'][0] == pytest.approx(start + 0.7 * (end - start), abs=0.01)
        assert doc['reading']['command_topic'] == 'hardware/command'

        # Out of range: refused with the reason, the old value kept.
        bad = _set(node, setp, {f'joints.{names[0]}.damping': -1.0})
        assert not bad[0].successful and bad[0].reason
        # File paths: the folders are fixed, a recording must lie inside its folder.
        req = SetParameters.Request(parameters=[
            Parameter('recording', value='/etc/hostname').to_parameter_msg(),
            Parameter('recording', value='../elsewhere.mcap').to_parameter_msg(),
            Parameter('recordings_dir', value='/tmp').to_parameter_msg(),
            Parameter('export_dir', value='/tmp').to_parameter_msg()])
        refused = _call(node, setp, req).results
        assert not any(r.successful for r in refused), [r.reason for r in refused]
        assert 'outside' in refused[0].reason and 'outside' in refused[1].reason

        # The matched model (as SysID would push it) passes, at the noise floor.
        matched = {}
        for i, j in enumerate(names):
            matched[f'joints.{j}.damping'] = truth.viscous_damping[i]
            matched[f'joints.{j}.frictionloss'] = truth.coulomb_friction[i]
            matched[f'joints.{j}.armature'] = truth.armature[i]
            matched[f'joints.{j}.damping_half_width'] = 0.01
        matched['latency_s'] = truth.latency_s
        assert all(r.successful for r in _set(node, setp, matched))
        gaps.clear()
        res = _call(node, evaluate, Trigger.Request())
        assert res.success and res.message.startswith('PASS'), res.message
        doc = wait_for(lambda: gaps[-1] if gaps else None, 30, what='latched gap')
        assert doc['passed'] is True
        assert doc['gap_identified'] <= 1.2 * doc['noise_floor']
        assert doc['gap_nominal'] > 5 * doc['gap_identified']

        # A late subscriber still gets the result (latched).
        late = []
        node2 = rclpy.create_node('test_sim_bridge_late')
        node2.create_subscription(String, '/sim_bridge/gap', lambda m: late.append(m.data),
                                  LATCHED_QOS)
        spinner2 = Spinner(node2)
        try:
            wait_for(lambda: late, 30, what='latched gap for a late subscriber')
        finally:
            spinner2.stop()

        res = _call(node, export, Trigger.Request())
        assert res.success, res.message
        paths = json.loads(res.message)
        model = mujoco.MjModel.from_xml_path(paths['mjcf'])
        dof = model.jnt_dofadr[[model.joint(j).id for j in names]]
        np.testing.assert_allclose(model.dof_damping[dof], truth.viscous_damping)
        # The robot's own armature, less what MuJoCo's implicit damping adds at the exported
        # time step (arm3: implicitfast at sim_bridge's 1 ms), and read back as the robot's.
        assert model.opt.timestep == pytest.approx(0.001)
        np.testing.assert_allclose(model.dof_armature[dof],
                                   truth.armature - truth.viscous_damping * 0.0005)
        np.testing.assert_allclose(params_in_model(model, names).armature, truth.armature)
        assert os.path.isfile(paths['report']) and os.path.isfile(paths['domain_randomization'])
    finally:
        spinner.stop()
        rclpy.try_shutdown()
        code = proc.stop(timeout=60)   # a loaded machine can take a while to shut down
        with open(proc.log_path) as f:
            log = f.read()
        print(log[-3000:])
    assert code in (0, -2), log[-2000:]


def test_sim_bridge_refuses_a_missing_model_with_a_clear_message(tmp_path):
    proc = NodeProcess('sim_bridge', CONFIG, params={'model_path': str(tmp_path / 'no.xml')})
    try:
        code = proc.wait_exit(120)
        out = proc.output()
    finally:
        proc.stop()
    assert code == 2, out
    assert 'configuration error' in out and 'no.xml' in out


def test_sim_bridge_refine_service_fits_in_the_background_and_sets_the_parameters(
        recording_dir, tmp_path):
    folder, truth, names = recording_dir
    proc = NodeProcess('sim_bridge', CONFIG, params={'recordings_dir': str(folder),
                                                     'export_dir': str(tmp_path / 'export')})
    rclpy.init()
    node = rclpy.create_node('test_sim_bridge_refine')
    refined, gaps = [], []
    node.create_subscription(String, '/sim_bridge/refined',
                             lambda m: refined.append(json.loads(m.data)), LATCHED_QOS)
    node.create_subscription(String, '/sim_bridge/gap', lambda m: gaps.append(json.loads(m.data)),
                             LATCHED_QOS)
    refine = node.create_client(Trigger, '/sim_bridge/refine')
    evaluate = node.create_client(Trigger, '/sim_bridge/evaluate_gap')
    setp = node.create_client(SetParameters, '/sim_bridge/set_parameters')
    spinner = Spinner(node)
    try:
        res = _call(node, refine, Trigger.Request())   # from the config's nominal values
        assert res.success and 'in the background' in res.message, res.message
        assert all(j in res.message for j in names)
        # The replayer is the refinement's meanwhile: replays are refused, with the reason.
        busy = _call(node, evaluate, Trigger.Request())
        assert not busy.success and 'refinement is running' in busy.message, busy.message
        again = _call(node, refine, Trigger.Request())
        assert not again.success and 'refinement is running' in again.message
        # Parameters stay settable meanwhile (the node is not blocked).
        assert _set(node, setp, {'gap_threshold': 0.15})[0].successful
        doc = wait_for(lambda: refined[-1] if refined else None, 600, what='/sim_bridge/refined')
        assert doc['success'], doc
        assert doc['cost_final'] < doc['cost_start']
        values = doc['values']
        for i, j in enumerate(names):
            assert values[f'joints.{j}.frictionloss'] == pytest.approx(
                truth.coulomb_friction[i], rel=0.15), (j, values)
            assert values[f'joints.{j}.damping'] == pytest.approx(
                truth.viscous_damping[i], rel=0.15), (j, values)
            assert values[f'joints.{j}.frictionloss_half_width'] > 0
        # They are the node's parameters now: the gap on the recording is at the noise floor.
        res = _call(node, evaluate, Trigger.Request())
        assert res.success and res.message.startswith('PASS'), res.message
        gap = wait_for(lambda: gaps[-1] if gaps else None, 30, what='latched gap')
        assert gap['gap_identified'] <= 1.2 * gap['noise_floor'], gap
        # The operator's verb: calls it, waits for the result, prints the values.
        cli = subprocess.run([sys.executable, '-m', 'simreal_ros.client.cli', 'refine'], cwd=REPO,
                             capture_output=True, text=True, timeout=600)
        assert cli.returncode == 0, cli.stdout + cli.stderr
        assert 'refine (sim_bridge): ok' in cli.stdout and 'cost' in cli.stdout, cli.stdout
        assert f'joints.{names[0]}.frictionloss' in cli.stdout and '+-' in cli.stdout
    finally:
        spinner.stop()
        rclpy.try_shutdown()
        proc.stop(timeout=60)
