"""sim_robot's parameters: every one declared with its descriptor and range, and the one
changed at run time, test.plant_change (a rehearsal's change of the hidden true plant).

Part of the sim_robot node (simreal_ros/nodes/sim_robot.py), which mixes in `Parameters`;
docs/configuration.md lists every parameter (generated from these declarations).
"""
import json

from rclpy.parameter import Parameter

from simreal_ros.core.config import ConfigError
from simreal_ros.nodes.common import (EXECUTOR_DOC, OWN_TICK_LOOP_DOC, declare, declare_names,
                                      declare_rogue_parameters)

PLANT_ARRAYS = ('coulomb_friction', 'viscous_damping', 'armature', 'torque_limit')
PLANT_SCALARS = ('latency_s', 'noise_position', 'noise_velocity', 'noise_effort')


class Parameters:
    """Declare and read the parameters; apply test.plant_change (mixed into SimRobot)."""

    def _change_plant(self, text):
        """Apply test.plant_change (JSON); return (ok, message naming what was wrong)."""
        if not self.plant_change_enabled:
            return False, ('test.plant_change refused: test.plant_change_enabled is false (set '
                           'it in the parameter file of a rehearsal; never on a real robot)')
        try:
            factors = json.loads(text) if text.strip() else {}
        except ValueError as exc:
            return False, f'test.plant_change is not JSON: {exc}'
        try:
            with self._lock:
                values = self.plant.change_truth(factors)
        except ValueError as exc:
            return False, f'test.plant_change: {exc}'
        self.plant_changes += 1
        self.get_logger().warning(f'true plant changed (rehearsal): {factors or "restored"} '
                                  f'-> {values}')
        return True, ''

    def _on_set_parameters(self, params):
        from rcl_interfaces.msg import SetParametersResult
        for param in params:
            if param.name == 'test.plant_change':
                ok, why = self._change_plant(param.value)
                if not ok:
                    return SetParametersResult(successful=False, reason=why)
        return SetParametersResult(successful=True)

    def _declare_parameters(self):
        p = {}
        p['model_path'] = declare(self, 'model_path', '', 'MJCF file: absolute, '
                                  'package://simreal_ros/..., or relative to the robot file '
                                  'that sets it, then the current directory, then the source '
                                  'checkout', read_only=True)
        p['joint_names'] = self._declare_array('joint_names', Parameter.Type.STRING_ARRAY,
                                               'actuated joints exposed, by MJCF name')
        p['physics_dt'] = declare(self, 'physics_dt', 0.001, 'physics step (s)', low=1e-5,
                                  high=0.02, read_only=True)
        p['publish_rate_hz'] = declare(self, 'publish_rate_hz', 500.0, 'joint_states rate (Hz)',
                                       low=1.0, high=5000.0, read_only=True)
        p['command_mode'] = declare(self, 'command_mode', 'position', "'position': PD at the "
                                    "physics rate, as motor drivers do; 'effort': torque only",
                                    read_only=True)
        p['kp'] = self._declare_array('kp', Parameter.Type.DOUBLE_ARRAY,
                                      'position gain per joint (N*m/rad)')
        p['kd'] = self._declare_array('kd', Parameter.Type.DOUBLE_ARRAY,
                                      'velocity gain per joint (N*m*s/rad)')
        p['command_publishers'] = declare_names(
            self, 'command_publishers', 'nodes whose hardware/command this driver obeys (names '
            'relative to its namespace, or /ns/name): on a robot, the supervisor; `simreal up` '
            'and the launch file set it to safety_supervisor when they start one. Empty (the '
            'default, for benches that command it directly): any one node, and a second one '
            'makes both rogues')
        p['rogue_publisher_action'], p['publisher_check_period_s'] = declare_rogue_parameters(
            self, 'hardware/command', 'every joint damped and every command refused while a '
            'rogue publishes')
        p['command_timeout_s'] = declare(self, 'command_timeout_s', 0.1, 'a joint without a new '
                                         'command for this long gets damping (s)', low=0.001,
                                         high=10.0, read_only=True)
        p['real_time_factor'] = declare(self, 'real_time_factor', 1.0, 'simulated s per wall s; '
                                        '0 = as fast as possible', low=0.0, high=100.0,
                                        read_only=True)
        p['publish_clock'] = declare(self, 'publish_clock', False, 'own /clock and stamp in '
                                     'simulated time', read_only=True)
        p['initial_position'] = self._declare_array('initial_position',
                                                    Parameter.Type.DOUBLE_ARRAY,
                                                    'initial joint positions (rad); empty = model')
        p['seed'] = declare(self, 'seed', 0, 'sensor noise seed', low=0, read_only=True)
        p['hold_until_command'] = declare(self, 'hold_until_command', False, 'do not advance '
                                          'the physics until the first valid command with '
                                          'position targets (any command in effort mode): a '
                                          'robot in its gantry, which a safe-mode damping '
                                          'command does not lower; state is still published',
                                          read_only=True)
        p['plant_enabled'] = declare(self, 'plant_enabled', True, 'apply the hidden plant truth',
                                     read_only=True)
        for key in PLANT_ARRAYS:
            p['plant.' + key] = self._declare_array('plant.' + key, Parameter.Type.DOUBLE_ARRAY,
                                                    f'hidden true {key} per joint')
        for key in PLANT_SCALARS:
            p['plant.' + key] = declare(self, 'plant.' + key, 0.0, f'hidden true {key}', low=0.0,
                                        read_only=True)
        p['executor'] = declare(self, 'executor', 'events', EXECUTOR_DOC, read_only=True)
        p['own_tick_loop'] = declare(self, 'own_tick_loop', True, OWN_TICK_LOOP_DOC,
                                     read_only=True)
        p['test.plant_change_enabled'] = declare(
            self, 'test.plant_change_enabled', False, 'rehearsal only: allow '
            'test.plant_change at run time (a simulated robot only; no hardware driver has it)',
            read_only=True)
        p['test.plant_change'] = declare(
            self, 'test.plant_change', '', 'rehearsal only (needs test.plant_change_enabled): '
            'JSON {joint: {coulomb_friction|viscous_damping|armature: factor}} scaling the '
            "true plant now, as a motor heats; '{}' or '' restores it")
        p['base_pose_rate_hz'] = declare(self, 'base_pose_rate_hz', 50.0, 'rate of the '
                                         'ground-truth sim/base_pose (floating base), for '
                                         "benches' distance and fall checks: a third of the "
                                         "node's publishing at the joint_states rate, not needed "
                                         'at it (Hz)', low=0.1, high=5000.0, read_only=True)
        p.update(self._lockstep_declare())
        p['gantry'] = declare(self, 'gantry', False, 'floating base: start hanging in a gantry '
                              '(the base held where it is, the legs free) until sim/gantry '
                              '(std_msgs/Bool) false lowers it; true hangs it again',
                              read_only=True)
        p['gantry_lift'] = declare(self, 'gantry_lift', -1.0, 'floating base: >= 0 bolts the '
                                   'base this many m above its initial pose (a robot hanging in '
                                   'a rigid gantry for SysID: its legs clear of the floor and '
                                   'loaded by gravity, its IMU at rest; sim/gantry cannot lower '
                                   'it); < 0: off (m)', low=-1.0, high=5.0, read_only=True)
        p['interface'] = declare(self, 'interface', 'ros', "'ros': hardware/command in, "
                                 "joint_states/imu out; 'unitree_hg' (G1, H1_2) or 'unitree_go' "
                                 '(Go2, H1): rt/lowcmd in, rt/lowstate out over CycloneDDS, as '
                                 'the robot', read_only=True)
        p['motor_indices'] = self._declare_array('motor_indices', Parameter.Type.INTEGER_ARRAY,
                                                 'Unitree interface: motor index of each of '
                                                 'joint_names in LowCmd_/LowState_ (empty = '
                                                 '0, 1, ...)')
        p['unitree.domain_id'] = declare(self, 'unitree.domain_id', 0, 'Unitree interface: DDS '
                                         'domain of rt/lowcmd and rt/lowstate', low=0, high=232,
                                         read_only=True)
        p['unitree.network_interface'] = declare(self, 'unitree.network_interface', 'lo',
                                                 'Unitree interface: network interface '
                                                 "(default lo: a simulator must not publish "
                                                 "the robot's topics on its network)",
                                                 read_only=True)
        p['unitree.mode_machine'] = declare(self, 'unitree.mode_machine', 7, 'Unitree '
                                            'interface: the mode_machine this robot reports; '
                                            'commands carrying another are dropped (7 is '
                                            'arbitrary: a host that does not copy it from '
                                            'LowState_ is caught)', low=0, high=255,
                                            read_only=True)
        if not p['joint_names']:
            raise ConfigError('parameter joint_names is empty: list the actuated joints to expose')
        return p

    def _declare_array(self, name, ptype, description):
        from rcl_interfaces.msg import ParameterDescriptor
        value = self.declare_parameter(
            name, ptype, ParameterDescriptor(description=description, read_only=True)).value
        return list(value) if value is not None else []
