"""What `unitree_bridge` decides, without ROS or DDS: the supervisor's command in, a Unitree
`LowCmd_` out, and when to send damping instead.

The supervisor's `hardware/command` (sensor_msgs/JointState, by name) means what it means to
sim_robot: a position target is PD with the joint's kp and kd (velocity target 0 unless
given), a velocity without a position is damping (kd only), effort is feed-forward. A Unitree
motor takes exactly these terms (q, dq, tau, kp, kd), so each joint's command maps to its motor
one to one, with the robot file's gains.

The robot obeys the last command it heard, however old. So this side damps on its own
(kp = 0, kd = `damping_kd`, every motor it drives, held ones included) whenever:
- no `LowState_` has arrived within `state_timeout_s` (the robot or the link is gone: no
  command is computed from an old state; before the first one nothing is sent at all),
- the supervisor is silent: its heartbeat not heard within `command_timeout_s` (and, with
  `require_heartbeat`, never heard yet), or a joint's command older than `command_timeout_s`
  (that joint),
- the operator pressed the remote's e-stop buttons (latched here until the remote's reset
  buttons reset the supervisor; the node asks the supervisor for the e-stop as well).
Never the last target.

What it accepts from the wire depends on who is on the other side (`peer`):
- 'robot' (the default): every `LowState_` must carry its CRC; one that does not is counted
  (`lowstate_bad_crc`) and not used.
- 'simulator': the vendor's simulator (unitree_mujoco) fills neither `crc` nor `mode_machine`
  nor `tick` (all 0). A state whose crc is 0 is accepted and counted (`lowstate_crc_unset`);
  one with a non-zero crc that does not match is rejected as on a robot (a simulator that fills
  CRCs is checked). `mode_machine` 0 and a `tick` that does not advance are counted
  (`lowstate_mode_machine_unset`, `lowstate_tick_unset`). Never set it for a robot: a robot
  whose CRC failed would be obeyed.
A `LowState_` whose `tick` (the robot's 1 ms counter) is behind the one in use is older
information (a second writer, a reordering link): never used, counted
(`lowstate_out_of_order`). The bridge stamps `joint_states` when it publishes, so the
supervisor's order rule could not see it. Once the one in use is older than `state_timeout_s`
(the bridge damps then), an earlier tick starts the order again (a robot or simulator that
restarted its counter).

Motors the policy does not drive (a 12-dof leg policy on a 29-motor G1: waist and arms) are
held at configured positions and gains, and damped with the rest.
"""
from dataclasses import dataclass, field

import numpy as np

from simreal_ros.core import unitree
from simreal_ros.core.config import ConfigError
from simreal_ros.core.commands import parse_joint_command


PEERS = ('robot', 'simulator')


@dataclass
class WireSettings:
    """The robot side's DDS: which domain, which interface, how peers are discovered."""

    domain_id: int = 0
    network_interface: str = ''
    multicast: bool = True
    peers: list = field(default_factory=list)
    source: str = 'unitree_bridge parameters'

    def validate(self):
        """Raise ConfigError naming the setting when the robot side could never be found."""
        src = self.source
        if not 0 <= int(self.domain_id) <= 232:
            raise ConfigError(f'{src}: unitree.domain_id {self.domain_id} is not in 0..232')
        if self.network_interface and not all(
                c.isalnum() or c in '-_.:@' for c in self.network_interface):
            raise ConfigError(f'{src}: unitree.network_interface {self.network_interface!r} '
                              'is not an interface name (e.g. eth0, enp3s0, lo)')
        for peer in self.peers:
            if not peer or any(c.isspace() or c in '<>"&' for c in peer):
                raise ConfigError(f'{src}: unitree.peers has {peer!r}, not an address')
        if not self.multicast and not self.peers:
            raise ConfigError(f'{src}: unitree.multicast is false and unitree.peers is empty: '
                              'nothing could be discovered; give the robot\'s address in '
                              "unitree.peers (e.g. ['192.168.123.161']) or allow multicast")
        return self

    def effective_peers(self):
        """The unicast peers used: on `lo` this machine's own address is always one."""
        peers = list(self.peers)
        if self.network_interface == 'lo' and '127.0.0.1' not in peers:
            peers.append('127.0.0.1')
        return peers

    def describe(self):
        """One line for logs and the status: what the bridge listens on."""
        peers = self.effective_peers()
        return (f'DDS domain {self.domain_id} on {self.network_interface or "(any interface)"}'
                f', multicast {"on" if self.multicast else "off"}'
                + (f', peers {", ".join(peers)}' if peers else ''))

    def no_writer_advice(self, waited):
        """What to check when no LowState_ writer has been matched after `waited` s."""
        return (f'no LowState_ writer matched in {waited:.0f} s on {self.describe()}: check '
                'unitree.domain_id (the robot\'s is 0), unitree.network_interface (the one '
                'facing the robot: `ip -br addr`), unitree.multicast (the robot and the '
                "vendor's simulator discover by multicast) and unitree.peers (the robot's "
                'address where multicast is blocked)')


@dataclass
class BridgeConfig:
    interface: str
    joint_names: list
    motor_index: list
    kp: list
    kd: list
    damping_kd: list = None          # per joint; None = kd
    held_index: list = field(default_factory=list)
    held_position: list = field(default_factory=list)
    held_kp: list = field(default_factory=list)
    held_kd: list = field(default_factory=list)
    command_timeout: float = 0.1
    state_timeout: float = 0.05
    require_heartbeat: bool = True
    mode_pr: int = 0
    motor_mode: int = 1
    estop_buttons: tuple = ('select',)   # unitree_rl_gym deploy_real: select = stop, damp
    reset_buttons: tuple = ('start',)
    peer: str = 'robot'
    source: str = 'unitree_bridge parameters'

    def validate(self):
        """Raise ConfigError naming the parameter when the configuration is inconsistent."""
        src = self.source
        if self.interface not in unitree.INTERFACES:
            raise ConfigError(f'{src}: interface {self.interface!r} is not one of '
                              f'{unitree.INTERFACES}')
        n = len(self.joint_names)
        if n == 0:
            raise ConfigError(f'{src}: joint_names is empty')
        if len(set(self.joint_names)) != n:
            raise ConfigError(f'{src}: joint_names repeats a name: {self.joint_names}')
        motors = unitree.HG_MOTORS if self.interface == 'unitree_hg' else unitree.GO_MOTORS
        if not self.motor_index:
            self.motor_index = list(range(n))
        for key, want in (('motor_indices', n), ('kp', n), ('kd', n)):
            have = len(self.motor_index if key == 'motor_indices' else getattr(self, key))
            if have != want:
                raise ConfigError(f'{src}: {key} has {have} values for {n} joint_names')
        if self.damping_kd is None or len(self.damping_kd) == 0:
            self.damping_kd = list(self.kd)
        if len(self.damping_kd) != n:
            raise ConfigError(f'{src}: damping_kd has {len(self.damping_kd)} values for {n} '
                              'joint_names')
        h = len(self.held_index)
        for key in ('held_position', 'held_kp', 'held_kd'):
            if len(getattr(self, key)) != h:
                raise ConfigError(f'{src}: {key} has {len(getattr(self, key))} values for '
                                  f'{h} held_motor_indices')
        every = list(self.motor_index) + list(self.held_index)
        if len(set(every)) != len(every) or not all(0 <= int(i) < motors for i in every):
            raise ConfigError(f'{src}: motor_indices + held_motor_indices {every} must be '
                              f'distinct motor indices in 0..{motors - 1}')
        for key in ('kp', 'kd', 'damping_kd', 'held_position', 'held_kp', 'held_kd'):
            values = np.asarray(getattr(self, key), dtype=float)
            if not np.all(np.isfinite(values)):
                raise ConfigError(f'{src}: {key} has non-finite values')
            if key != 'held_position' and np.any(values < 0):
                raise ConfigError(f'{src}: {key} has negative gains')
        if np.any(np.asarray(self.damping_kd, dtype=float) <= 0):
            raise ConfigError(f'{src}: damping_kd must be > 0 for every joint (damping is the '
                              'safe output)')
        try:
            self.estop_buttons = unitree.check_buttons(list(self.estop_buttons),
                                                       f'{src}: remote.estop_buttons')
            self.reset_buttons = unitree.check_buttons(list(self.reset_buttons),
                                                       f'{src}: remote.reset_buttons')
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if self.estop_buttons and set(self.estop_buttons) == set(self.reset_buttons):
            raise ConfigError(f'{src}: remote.estop_buttons and remote.reset_buttons are the '
                              'same buttons')
        if self.peer not in PEERS:
            raise ConfigError(f'{src}: unitree.peer {self.peer!r} is not one of {PEERS}')
        if self.command_timeout <= 0 or self.state_timeout <= 0:
            raise ConfigError(f'{src}: command_timeout_s and state_timeout_s must be > 0')
        return self


def _as_slice(index):
    """`index` as a slice when it is a contiguous ascending run (cheaper to assign through)."""
    if index.size and np.array_equal(index, np.arange(index[0], index[0] + index.size)):
        return slice(int(index[0]), int(index[0]) + index.size)
    return index


class BridgeCore:
    """The adapter's state and decisions; times are seconds on one monotonic clock."""

    def __init__(self, cfg):
        self.cfg = cfg.validate()
        n = len(cfg.joint_names)
        self.n = n
        self.index = {name: i for i, name in enumerate(cfg.joint_names)}
        self.motor = np.asarray(cfg.motor_index, dtype=np.intp)
        self.held = np.asarray(cfg.held_index, dtype=np.intp)
        self.kp = np.asarray(cfg.kp, dtype=float)
        self.kd = np.asarray(cfg.kd, dtype=float)
        self.damping_kd = np.asarray(cfg.damping_kd, dtype=float)
        self.held_q = np.asarray(cfg.held_position, dtype=float)
        self.held_kp = np.asarray(cfg.held_kp, dtype=float)
        self.held_kd = np.asarray(cfg.held_kd, dtype=float)
        # the command each joint executes (the supervisor's terms, as gains and targets)
        self.q = np.zeros(n)
        self.dq = np.zeros(n)
        self.tau = np.zeros(n)
        self.cmd_kp = np.zeros(n)
        self.cmd_kd = np.zeros(n)
        self.updated = np.full(n, -np.inf)
        self.heartbeat = None
        self.state = None            # latest LowState_ record with a good CRC
        self.state_time = None
        self.remote_latched = False
        self._pressed = frozenset()
        self.out = unitree.new(cfg.interface, 'LowCmd_')
        # Field views into `out`, made once (a structured field lookup per tick and field
        # was half of compose()'s time), and the motor indices as slices when contiguous.
        mc = self.out['motor_cmd']
        self._f = {k: mc[k] for k in ('mode', 'q', 'dq', 'tau', 'kp', 'kd')}
        self.m = _as_slice(self.motor)
        self.h = _as_slice(self.held)
        self.counters = dict(commands=0, commands_rejected=0, lowstate=0, lowstate_bad_crc=0,
                             lowcmd_sent=0, damping_sent=0, remote_estops=0, remote_resets=0,
                             lowstate_crc_unset=0, lowstate_mode_machine_unset=0,
                             lowstate_tick_unset=0, lowstate_out_of_order=0)
        self._tick = None

    # -- inputs ---------------------------------------------------------------------------
    def command(self, names, position=(), velocity=(), effort=(), now=0.0):
        """Take a hardware/command; ValueError (nothing changed) when it is malformed."""
        idx, fields = parse_joint_command(names, self.cfg.joint_names, position, velocity,
                                          effort)
        pos, vel, eff = fields['position'], fields['velocity'], fields['effort']
        self.q[idx] = pos if pos is not None else 0.0
        self.cmd_kp[idx] = self.kp[idx] if pos is not None else 0.0
        self.dq[idx] = vel if vel is not None else 0.0
        self.cmd_kd[idx] = self.kd[idx] if (pos is not None or vel is not None) else 0.0
        self.tau[idx] = eff if eff is not None else 0.0
        self.updated[idx] = now
        self.counters['commands'] += 1

    def beat(self, now):
        self.heartbeat = now

    def take_state(self, record, now):
        """Take a LowState_; returns 'estop' or 'reset' on a remote button combination's
        press (once per press), else None. A state whose CRC fails is counted and not used
        (with peer 'simulator', a crc of 0 is accepted and counted: the module's docstring)."""
        if not unitree.crc_ok(record):
            if self.cfg.peer != 'simulator' or int(record['crc']) != 0:
                self.counters['lowstate_bad_crc'] += 1
                return None
            self.counters['lowstate_crc_unset'] += 1
        tick = int(record['tick'])
        if (self._tick is not None and 0 < (self._tick - tick) % 2**32 < 2**31
                and now - self.state_time <= self.cfg.state_timeout):
            self.counters['lowstate_out_of_order'] += 1     # behind the one in use
            return None
        if self.cfg.peer == 'simulator':
            if self.cfg.interface == 'unitree_hg' and int(record['mode_machine']) == 0:
                self.counters['lowstate_mode_machine_unset'] += 1
            if tick == self._tick:
                self.counters['lowstate_tick_unset'] += 1
        self._tick = tick
        self.state, self.state_time = record, now
        self.counters['lowstate'] += 1
        pressed = frozenset(unitree.buttons_pressed(record['wireless_remote']))
        before, self._pressed = self._pressed, pressed
        event = None
        for name, combo in (('estop', self.cfg.estop_buttons),
                            ('reset', self.cfg.reset_buttons)):
            if combo and set(combo) <= pressed and not set(combo) <= before:
                event = name
                break       # e-stop first: a press of both is an e-stop
        if event == 'estop':
            self.remote_latched = True
            self.counters['remote_estops'] += 1
        elif event == 'reset':
            self.counters['remote_resets'] += 1
        return event

    def clear_remote(self):
        """The supervisor accepted the remote's reset: the local latch goes too."""
        self.remote_latched = False

    # -- output ---------------------------------------------------------------------------
    def damp_reason(self, now):
        """Why every motor gets damping now (None: the supervisor's command goes out)."""
        cfg = self.cfg
        if self.state is None:
            return self.no_state_reason()
        age = now - self.state_time
        if age > cfg.state_timeout:
            return f'LowState_ {age * 1e3:.0f} ms old (state_timeout_s {cfg.state_timeout:g})'
        if self.remote_latched:
            return 'remote e-stop'
        if self.heartbeat is None:
            if cfg.require_heartbeat:
                return 'no safety/heartbeat heard yet'
        elif now - self.heartbeat > cfg.command_timeout:
            return (f'safety/heartbeat silent {(now - self.heartbeat) * 1e3:.0f} ms '
                    f'(command_timeout_s {cfg.command_timeout:g})')
        if not np.any(now - self.updated <= cfg.command_timeout):
            return f'no hardware/command within {cfg.command_timeout:g} s'
        return None

    def no_state_reason(self):
        """Why no LowState_ is in use: none arrived, or every one was rejected (and why)."""
        bad = self.counters['lowstate_bad_crc']
        if not bad:
            return 'no LowState_ yet'
        hint = (" (the vendor's simulator leaves crc 0: unitree.peer simulator accepts that)"
                if self.cfg.peer == 'robot' else ' (a non-zero crc is checked with any peer)')
        return f'no LowState_ accepted: {bad} rejected for a bad CRC{hint}'

    def compose(self, now):
        """The LowCmd_ record to send now and why (None before any LowState_: nothing may be
        sent before the robot's state is known)."""
        if self.state is None:
            return None, self.no_state_reason()
        reason = self.damp_reason(now)
        f, m, h = self._f, self.m, self.h
        if reason is None:
            fresh = now - self.updated <= self.cfg.command_timeout
            if fresh.all():
                f['q'][m], f['dq'][m], f['tau'][m] = self.q, self.dq, self.tau
                f['kp'][m], f['kd'][m] = self.cmd_kp, self.cmd_kd
            else:   # joints without a recent command: damping
                f['q'][m] = np.where(fresh, self.q, 0.0)
                f['dq'][m] = np.where(fresh, self.dq, 0.0)
                f['tau'][m] = np.where(fresh, self.tau, 0.0)
                f['kp'][m] = np.where(fresh, self.cmd_kp, 0.0)
                f['kd'][m] = np.where(fresh, self.cmd_kd, self.damping_kd)
            if self.held.size:
                f['q'][h], f['dq'][h], f['tau'][h] = self.held_q, 0.0, 0.0
                f['kp'][h], f['kd'][h] = self.held_kp, self.held_kd
            self.counters['lowcmd_sent'] += 1
        else:
            self._damping()
            self.counters['damping_sent'] += 1
        self._finish()
        return self.out, reason or 'commanded'

    def _finish(self):
        f, out = self._f, self.out
        f['mode'][self.m] = self.cfg.motor_mode
        if self.held.size:
            f['mode'][self.h] = self.cfg.motor_mode
        if self.cfg.interface == 'unitree_hg':
            out['mode_pr'] = self.cfg.mode_pr
            out['mode_machine'] = self.state['mode_machine']
        unitree.stamp_crc(out)

    def _damping(self):
        f = self._f
        for idx, kd, size in ((self.m, self.damping_kd, self.motor.size),
                              (self.h, self.held_kd, self.held.size)):
            if size == 0:
                continue
            f['q'][idx] = f['dq'][idx] = f['tau'][idx] = f['kp'][idx] = 0.0
            f['kd'][idx] = kd

    def damping(self):
        """A damping LowCmd_ (shutdown); None before any LowState_."""
        if self.state is None:
            return None
        self._damping()
        self._finish()
        return self.out

    def written(self):
        """(position, velocity, effort) of joint_names in the LowCmd_ last composed, as
        hardware/command carries them: NaN where the term is off (kp 0: no position target;
        kp and kd 0: no velocity term). The echo on driver/applied_command."""
        f, m = self._f, self.m
        kp, kd = f['kp'][m].astype(float), f['kd'][m].astype(float)
        q = np.where(kp > 0, f['q'][m].astype(float), np.nan)
        dq = np.where((kp > 0) | (kd > 0), f['dq'][m].astype(float), np.nan)
        return q, dq, f['tau'][m].astype(float)

    # -- state out ------------------------------------------------------------------------
    def joint_state(self):
        """(position, velocity, effort) of joint_names from the latest LowState_."""
        ms = self.state['motor_state'][self.motor]
        return (ms['q'].astype(float), ms['dq'].astype(float), ms['tau_est'].astype(float))

    def imu(self):
        """(quaternion w x y z, gyroscope, accelerometer) from the latest LowState_."""
        imu = self.state['imu_state']
        return (imu['quaternion'].astype(float), imu['gyroscope'].astype(float),
                imu['accelerometer'].astype(float))
