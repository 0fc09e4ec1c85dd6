"""sim_robot's Unitree low-level interface (issue 14): with `interface: unitree_hg` or
`unitree_go`, LowState_ on rt/lowstate and LowCmd_ from rt/lowcmd (CRC-checked, as the robot
takes them) instead of the ROS topics; the remote's buttons from sim/remote_buttons.

Part of the sim_robot node (simreal_ros/nodes/sim_robot.py), which mixes in
`UnitreeInterface`.
"""
import numpy as np
import rclpy
from rosgraph_msgs.msg import Clock as ClockMsg
from std_msgs.msg import String

from simreal_ros.core import unitree
from simreal_ros.core.config import ConfigError
from simreal_ros.core.plant import JointCommand


class UnitreeInterface:
    """LowCmd_ in, LowState_ out (mixed into SimRobot)."""

    # -- Unitree low-level interface (issue 14) -------------------------------------------
    def _unitree_init(self, p, group):
        from simreal_ros.drivers import unitree_dds
        n = self.plant.n
        idx = list(p['motor_indices']) or list(range(n))
        motors = unitree.HG_MOTORS if self.interface == 'unitree_hg' else unitree.GO_MOTORS
        if len(idx) != n or len(set(idx)) != n or not all(0 <= i < motors for i in idx):
            raise ConfigError(f'sim_robot parameter motor_indices: {idx} must give {n} distinct '
                              f'motor indices in 0..{motors - 1}, one per joint_names entry')
        self.motor_index = np.asarray(idx, dtype=np.intp)
        self.mode_machine = int(p['unitree.mode_machine'])
        self.counters.update(lowcmd_received=0, bad_crc_rejected=0, wrong_mode_machine=0,
                             lowcmd_nonfinite=0, lowstate_sent=0)
        self.wire = unitree_dds.Wire(p['unitree.domain_id'], p['unitree.network_interface'])
        self.lowcmd_reader = self.wire.reader(self.interface, 'LowCmd_', unitree_dds.TOPIC_CMD,
                                              depth=16)
        self.lowstate_writer = self.wire.writer(self.interface, 'LowState_',
                                                unitree_dds.TOPIC_STATE)
        self._lowstate = unitree.new(self.interface, 'LowState_')
        self._lowstate['mode_machine'] = self.mode_machine
        self._lowstate['motor_state']['mode'][self.motor_index] = 1
        self._remote = unitree.remote_bytes()
        self.create_subscription(String, 'sim/remote_buttons', self._on_remote, 10,
                                 callback_group=group)

    def _on_remote(self, msg):
        names = [b.strip() for b in msg.data.split(',') if b.strip()]
        try:
            self._remote = unitree.remote_bytes(names)
        except ValueError as exc:
            self.get_logger().warn(f'sim/remote_buttons: {exc}')

    def _unitree_take_commands(self):
        """Apply the LowCmd_ samples received since the last tick, as the robot would."""
        for rec in self.lowcmd_reader.take():
            self.counters['lowcmd_received'] += 1
            if not unitree.crc_ok(rec):
                self.counters['bad_crc_rejected'] += 1
                continue
            if int(rec['mode_machine']) != self.mode_machine:
                self.counters['wrong_mode_machine'] += 1
                continue
            mc = rec['motor_cmd'][self.motor_index]
            q, dq, tau = (mc[k].astype(float) for k in ('q', 'dq', 'tau'))
            kp, kd = mc['kp'].astype(float), mc['kd'].astype(float)
            if self.interface == 'unitree_go':   # the vendor's "no position/velocity" markers
                kp[q >= unitree.GO_POS_STOP * 0.999] = 0.0
                stop = dq >= unitree.GO_VEL_STOP * 0.999
                kd[stop], dq[stop] = 0.0, 0.0
                q[q >= unitree.GO_POS_STOP * 0.999] = 0.0
            off = mc['mode'] == 0
            kp[off] = kd[off] = tau[off] = 0.0
            if not all(np.all(np.isfinite(a)) for a in (q, dq, tau, kp, kd)):
                self.counters['lowcmd_nonfinite'] += 1
                continue
            cmd = JointCommand(np.arange(self.plant.n), position=q, velocity=dq, effort=tau,
                               kp=kp, kd=kd)
            with self._lock:
                self.plant.submit(cmd, self._arrival_time())
                self._commanded |= bool(np.any(kp > 0))

    def _unitree_publish(self, reading):
        st = self._lowstate
        st['tick'] = int(round(reading.time * 1000)) & 0xFFFFFFFF
        ms = st['motor_state']
        ms['q'][self.motor_index] = reading.position
        ms['dq'][self.motor_index] = reading.velocity
        ms['tau_est'][self.motor_index] = reading.effort
        if reading.orientation is not None:
            imu = st['imu_state']
            imu['quaternion'] = reading.orientation            # w, x, y, z, as the robot
            imu['gyroscope'] = reading.angular_velocity
            imu['accelerometer'] = reading.linear_acceleration
            w, x, y, z = reading.orientation
            imu['rpy'] = (np.arctan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y)),
                          np.arcsin(np.clip(2 * (w * y - z * x), -1.0, 1.0)),
                          np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)))
            self._pose_count += 1
            if self._pose_count >= self._pose_every:
                self._pose_count = 0
                self._publish_base_pose(reading, self.get_clock().now().to_msg())
        st['wireless_remote'] = self._remote
        unitree.stamp_crc(st)
        self.lowstate_writer.write(st)
        self.counters['lowstate_sent'] += 1
        if self.publish_clock:
            stamp = rclpy.time.Time(seconds=reading.time + self._clock_shift).to_msg()
            self.pub_clock.publish(ClockMsg(clock=stamp))
