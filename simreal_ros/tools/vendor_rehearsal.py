"""Run the vendor's own simulator (unitree_mujoco's simulate_python) headless, on a clock the
graph follows.

    python -m simreal_ros.tools.vendor_rehearsal --domain 182 --rtf 0.1

The vendor's `UnitreeSdk2Bridge` (read by path from the asset unitree_mujoco_simulate_python:
`simreal assets fetch unitree_mujoco_simulate_python`, docs/assets.md) publishes `LowState_` on
`rt/lowstate` and applies each `LowCmd_` from `rt/lowcmd` exactly as Unitree users rehearse with
it. Its own entry point opens a viewer and steps MuJoCo as fast as the computer allows (0.4-0.76 x
real time on a busy 2-core machine), while a graph on the wall clock would take a slow simulator
for a late robot. This runner instead:

- steps MuJoCo at a fixed real-time factor (`--rtf`; it reports the factor achieved, lower
  when the computer cannot keep it) and publishes simulated time on `/clock` after every step,
  so a graph with `use_sim_time` follows the simulator, however slowly it runs;
- holds the humanoid on the vendor's elastic band (the gantry) and lowers it on request:
  `gantry/lower` (std_srvs/Trigger) lowers it until the ground carries `--ground-share` of its
  weight and holds there ('grounded'); `gantry/release` takes the band off ('released'; or,
  with `--release-speed`, pays out slack until it carries under 5 % of the weight);
- publishes `vendor_sim/state` (std_msgs/String, JSON, 10 Hz): simulated time, base position,
  real-time factor achieved, LowCmd_ received, band state, fallen;
- takes faults on `vendor_sim/fault` (std_msgs/String): `stall <seconds>` freezes the
  simulator (no stepping, no LowState_, commands ignored: the vendor bridge's own guard when it
  has no data), `fill_crc on|off` stamps the CRC on every LowState_ (a simulator that fills
  CRCs), `bad_crc <n>` sends the next n states with a wrong CRC.

The vendor's bridge publishes `LowState_` from its own thread every `SIMULATE_DT` of wall time,
whatever the stepping; its `LowCmd_` handler sets MuJoCo's torques on arrival. Both stay as
the vendor wrote them.
"""
import argparse
import importlib.util
import json
import math
import os
from pathlib import Path
import sys
import threading
import time

import numpy as np

VENDOR = 'unitree_mujoco_simulate_python'          # the asset holding the vendor's bridge
SCENE = 'asset://unitree_g1_29dof/scene_29dof.xml'
FALL_Z = 0.5          # m of pelvis height: fallen (the G1 stands at 0.79 m)


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, str(path))
    if spec is None:
        raise SystemExit(f'vendor_rehearsal: cannot read {path}')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def vendor_folder():
    """Return the folder of the vendor's simulator (the asset, wherever it is)."""
    from simreal_ros.core.assets import folder
    return folder(VENDOR)


def load_vendor(vendor_dir, robot, domain, interface):
    """Import the vendor's config and bridge modules by path, configured for `robot`
    ('g1': unitree_hg types), no joystick; return the bridge module."""
    vendor_dir = Path(vendor_dir or vendor_folder())
    if not (vendor_dir / 'unitree_sdk2py_bridge.py').is_file():
        raise SystemExit(f'vendor_rehearsal: the vendor simulator is not at {vendor_dir}: '
                         f'get it with `simreal assets fetch {VENDOR}` (docs/assets.md), or '
                         'give --vendor DIR')
    config = _load('config', vendor_dir / 'config.py')
    config.ROBOT, config.DOMAIN_ID, config.INTERFACE = robot, int(domain), interface
    config.USE_JOYSTICK, config.PRINT_SCENE_INFORMATION = 0, False
    previous = sys.modules.get('config')
    sys.modules['config'] = config     # the bridge does `import config` at import time
    try:
        return _load('unitree_sdk2py_bridge', vendor_dir / 'unitree_sdk2py_bridge.py')
    finally:
        if previous is None:
            sys.modules.pop('config', None)
        else:
            sys.modules['config'] = previous


class StatePublisher:
    """Stands in for the vendor bridge's LowState_ publisher: the same Write, with the CRC
    stamped when asked (a simulator that fills CRCs) or deliberately wrong (a fault)."""

    def __init__(self, inner):
        from unitree_sdk2py.utils.crc import CRC
        self.inner, self.crc = inner, CRC()
        self.fill_crc = False
        self.bad_crc = 0
        self.written = 0

    def Write(self, msg, *args):   # noqa: N802 - the vendor's name
        if self.fill_crc or self.bad_crc:
            msg.crc = self.crc.Crc(msg)
            if self.bad_crc:
                msg.crc ^= 0x1
                self.bad_crc -= 1
        elif msg.crc:
            msg.crc = 0
        self.written += 1
        return self.inner.Write(msg, *args)


class VendorSim:
    """The vendor's bridge and MuJoCo, stepped here at a fixed real-time factor."""

    def __init__(self, scene, domain, interface='lo', rtf=0.1, dt=0.001, band=True,
                 band_length=0.4, lower_speed=0.2, ground_share=0.5, release_speed=0.0,
                 vendor_dir=None,
                 robot='g1', fill_crc=False, state_period=0.005, pace=True, max_wait=0.1):
        import mujoco
        self.mujoco = mujoco
        vendor = load_vendor(vendor_dir, robot, domain, interface)
        from unitree_sdk2py.core.channel import ChannelFactoryInitialize
        from simreal_ros.core.config import ConfigError, resolve_path
        try:
            scene = resolve_path(scene, what='--scene')
        except ConfigError as exc:
            raise SystemExit(f'vendor_rehearsal: {exc}') from None
        self.model = mujoco.MjModel.from_xml_path(str(scene))
        # The vendor bridge publishes LowState_ every model timestep of wall time (its thread's
        # interval, read once): built with `state_period`, then the physics gets `dt`.
        self.model.opt.timestep = float(state_period)
        self.data = mujoco.MjData(self.model)
        mujoco.mj_forward(self.model, self.data)
        ChannelFactoryInitialize(int(domain), interface)
        sim = self

        class CountingBridge(vendor.UnitreeSdk2Bridge):
            def LowCmdHandler(self, msg):   # noqa: N802 - the vendor's name
                sim.lowcmd += 1
                super().LowCmdHandler(msg)
                sim.command_arrived.set()

        self.lowcmd = 0
        self.command_arrived = threading.Event()
        self.bridge = CountingBridge(self.model, self.data)
        self.model.opt.timestep = float(dt)
        self.states = StatePublisher(self.bridge.low_state_puber)
        self.states.fill_crc = fill_crc
        self.bridge.low_state_puber = self.states
        self.band = vendor.ElasticBand()
        self.band.enable = bool(band)
        self.band.length = float(band_length)
        self.band_state = 'holding' if band else 'off'
        self.torso = self.model.body('torso_link').id
        self.weight = float(mujoco.mj_getTotalmass(self.model)) * 9.81
        self.lower_speed, self.ground_share = float(lower_speed), float(ground_share)
        self.release_speed = float(release_speed)
        self.tension = 0.0
        self._force = np.zeros(6)
        self.ground = 0.0
        self.rtf = float(rtf)
        self.dt = float(dt)
        self.steps = 0
        self.fallen = False
        self.stall_until = None
        self.stalls = 0
        self._stall_saved = None
        self._rtf_window = (time.monotonic(), 0.0)
        self.rtf_achieved = None
        self.rtf_window_s = 2.0
        self.lock = threading.Lock()
        self.pace, self.max_wait = bool(pace), float(max_wait)
        self.unpaced_steps = 0

    # -- physics ------------------------------------------------------------------------------
    def sim_time(self):
        return float(self.data.time)

    def step(self):
        """One MuJoCo step with the band's force (the vendor's ElasticBand)."""
        d = self.data
        if self.band.enable:
            force = self.band.Advance(d.qpos[:3], d.qvel[:3])
            d.xfrc_applied[self.torso, :3] = force
            self.tension = float(force[2])
            if self.band_state == 'lowering':
                self.band.length += self.lower_speed * self.dt
                if self.ground >= self.ground_share * self.weight:
                    self.band_state = 'grounded'
            elif self.band_state == 'releasing':   # slack given gradually, then off
                self.band.length += self.release_speed * self.dt
                if self.tension <= 0.05 * self.weight:
                    self.band.enable = False
                    self.band_state = 'released'
        else:
            d.xfrc_applied[self.torso, :3] = 0.0
            self.tension = 0.0
        self.mujoco.mj_step(self.model, d)
        self.steps += 1
        self.ground = self.ground_force()
        if d.qpos[2] < FALL_Z and self.band_state in ('released', 'off'):
            self.fallen = True

    def ground_force(self):
        """The normal force the ground carries (N): contacts with the world body."""
        m, d = self.model, self.data
        total, out = 0.0, self._force
        for i in range(d.ncon):
            c = d.contact[i]
            if m.geom_bodyid[c.geom1] == 0 or m.geom_bodyid[c.geom2] == 0:
                self.mujoco.mj_contactForce(m, d, i, out)
                total += float(out[0])
        return total

    def lower(self):
        if self.band_state == 'off':
            return False, 'no band: started with --no-band'
        if self.band_state == 'released':
            return False, 'the band is already released'
        if self.band_state == 'holding':
            self.band_state = 'lowering'
        return True, f'band {self.band_state}'

    def release(self):
        """Give slack at lower_speed until the band carries under 5 % of the weight, then
        take it off (an operator pays out the hoist; a sudden release is a push)."""
        if self.band_state == 'off':
            return False, 'no band: started with --no-band'
        if self.release_speed <= 0:
            self.band.enable = False
            self.band_state = 'released'
        elif self.band_state != 'released':
            self.band_state = 'releasing'
        return True, f'band {self.band_state}'

    def stall(self, seconds):
        """Freeze the simulator: no stepping, no LowState_, commands ignored (the vendor's
        bridge does nothing while its mj_data is None)."""
        with self.lock:
            if self.stall_until is None:
                self._stall_saved = self.bridge.mj_data
                self.bridge.mj_data = None
            self.stall_until = time.monotonic() + float(seconds)
            self.stalls += 1

    def _unstall(self, now):
        if self.stall_until is not None and now >= self.stall_until:
            self.bridge.mj_data = self._stall_saved
            self.stall_until = None
            return True
        return self.stall_until is None

    def tilt_deg(self):
        """The pelvis's tilt from upright (deg)."""
        w, x, y, z = (float(v) for v in self.data.qpos[3:7])
        up = 1.0 - 2.0 * (x * x + y * y)      # the body z axis's world z component
        return math.degrees(math.acos(max(-1.0, min(1.0, up))))

    def state(self):
        d = self.data
        return {'tilt_deg': round(self.tilt_deg(), 1), 'sim_time': round(self.sim_time(), 4),
                'base': [round(float(v), 4) for v in d.qpos[:3]],
                'rtf_target': self.rtf, 'rtf_achieved': self.rtf_achieved,
                'lowcmd': self.lowcmd, 'lowstate_written': self.states.written,
                'band': self.band_state, 'band_length': round(float(self.band.length), 3),
                'band_tension_n': round(self.tension, 1), 'weight_n': round(self.weight, 1),
                'ground_n': round(self.ground, 1),
                'fallen': self.fallen, 'stalls': self.stalls,
                'stalled': self.stall_until is not None, 'fill_crc': self.states.fill_crc,
                'steps': self.steps, 'unpaced_steps': self.unpaced_steps}

    # -- the loop -----------------------------------------------------------------------------
    def run(self, on_step, stop, duration=None):
        """Step at `rtf` x real time until `stop` is set (or `duration` s of simulated time);
        call on_step(sim_time) after each step. A schedule more than 0.1 s behind is not
        caught up in a burst: the computer is too slow, and rtf_achieved says so."""
        period = self.dt / self.rtf if self.rtf > 0 else 0.0
        start = time.monotonic()
        k = 0
        while not stop.is_set():
            now = time.monotonic()
            if not self._unstall(now):
                time.sleep(min(0.005, self.stall_until - now))
                start = time.monotonic() - k * period      # the stall is not caught up
                continue
            target = start + k * period
            if target > now:
                time.sleep(target - now)
            elif now - target > 0.1:
                start = now - k * period
            if self.pace and self.lowcmd:
                # A motor driver computes its PD on every fresh command; the vendor's bridge
                # computes the torque once per LowCmd_ and holds it. Stepping on without one
                # (a busy computer delays the bridge) holds a damping torque for many steps,
                # and the wrists (kd 10) oscillate at 50 rad/s: each step waits for a fresh
                # LowCmd_, at most max_wait (then steps anyway, counted).
                if not self.command_arrived.wait(self.max_wait):
                    self.unpaced_steps += 1
                if self.stall_until is not None:
                    continue
                self.command_arrived.clear()
                start = max(start, time.monotonic() - k * period - 0.1)
            with self.lock:
                self.step()
            k += 1
            on_step(self.sim_time())
            t0, s0 = self._rtf_window
            wall = time.monotonic() - t0
            if wall >= self.rtf_window_s:
                self.rtf_achieved = round((self.sim_time() - s0) / wall, 3)
                self._rtf_window = (time.monotonic(), self.sim_time())
            if duration is not None and self.sim_time() >= duration:
                break


def main(argv=None):
    """Run the vendor's simulator headless with /clock, the gantry and faults (module doc)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--scene', default=SCENE, help=f'MJCF scene (default: {SCENE}, '
                        'the G1 29-dof)')
    parser.add_argument('--vendor', default='', help='the vendor simulator folder (default: '
                        f'the asset {VENDOR})')
    parser.add_argument('--domain', type=int, required=True, help='the robot side\'s DDS '
                        'domain (the bridge\'s unitree.domain_id; never one a robot uses)')
    parser.add_argument('--interface', default='lo', help='network interface (default lo)')
    parser.add_argument('--rtf', type=float, default=0.1, help='real-time factor to step at '
                        '(0 = as fast as possible); a loaded computer achieves less, reported')
    parser.add_argument('--dt', type=float, default=0.001, help='MuJoCo timestep. The vendor '
                        "config's SIMULATE_DT 0.005 makes a damping of kd 10 (unitree_rl_lab's "
                        'arm gains) oscillate at 20 rad/s on the wrists: the vendor bridge '
                        'computes the torque from the last step\'s sensors and holds it a step '
                        '(at 0.002 the damped arms still swing up to 30 rad/s on the band)')
    parser.add_argument('--no-pace', action='store_true', help='step on the schedule alone, '
                        'not waiting for a fresh LowCmd_ per step (as the vendor\'s own loop)')
    parser.add_argument('--max-wait', type=float, default=0.1, help='longest wait for a fresh '
                        'LowCmd_ before a step (s, wall); then it steps anyway, counted')
    parser.add_argument('--state-period', type=float, default=0.005, help='LowState_ period '
                        "(s, wall; the vendor's SIMULATE_DT)")
    parser.add_argument('--no-band', action='store_true', help='start on the ground, no band')
    parser.add_argument('--band-length', type=float, default=0.4, help='elastic band length '
                        'at the start (m; the vendor\'s band pulls toward 3 m up: 0.4 hangs '
                        "the G1's feet about 0.1 m above the ground)")
    parser.add_argument('--lower-speed', type=float, default=0.2, help='gantry/lower speed '
                        '(m/s of simulated time)')
    parser.add_argument('--release-speed', type=float, default=0.0, help='gantry/release '
                        'pays out slack at this speed (m/s of simulated time) until the band '
                        'carries under 5 %% of the weight; 0 (default): off at once. Paid out '
                        'at 0.2 and 1.0 m/s the standing G1 fell while the band still pulled '
                        '(3 runs of 3, 2026-11-25)')
    parser.add_argument('--ground-share', type=float, default=0.5, help='gantry/lower stops '
                        'when the ground carries this share of the weight (contact forces)')
    parser.add_argument('--fill-crc', action='store_true', help='stamp the CRC on every '
                        'LowState_ (a simulator that fills CRCs; the vendor\'s leaves 0)')
    parser.add_argument('--duration', type=float, default=None, help='stop after this many '
                        's of simulated time (default: until SIGTERM)')
    args = parser.parse_args(argv)
    os.environ.setdefault('SDL_VIDEODRIVER', 'dummy')
    os.environ.setdefault('SDL_AUDIODRIVER', 'dummy')
    sim = VendorSim(args.scene, args.domain, args.interface, args.rtf, args.dt,
                    not args.no_band, args.band_length, args.lower_speed, args.ground_share,
                    release_speed=args.release_speed,
                    vendor_dir=args.vendor or None, fill_crc=args.fill_crc,
                    state_period=args.state_period,
                    pace=not args.no_pace, max_wait=args.max_wait)

    import rclpy
    from rclpy.clock import Clock, ClockType
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSDurabilityPolicy, QoSProfile
    from rosgraph_msgs.msg import Clock as ClockMsg
    from std_msgs.msg import String
    from std_srvs.srv import Trigger
    from simreal_ros.nodes.common import prefer_udp_transport
    prefer_udp_transport()
    rclpy.init(args=[])
    node = rclpy.create_node('vendor_sim')
    pub_clock = node.create_publisher(ClockMsg, '/clock', 10)
    latched = QoSProfile(depth=1, durability=QoSDurabilityPolicy.TRANSIENT_LOCAL)
    pub_state = node.create_publisher(String, 'vendor_sim/state', latched)
    clock_msg = ClockMsg()

    def on_step(t):
        sec, nsec = divmod(int(round(t * 1e9)), 1_000_000_000)
        clock_msg.clock.sec, clock_msg.clock.nanosec = sec, nsec
        pub_clock.publish(clock_msg)

    def service(action):
        def handle(request, response):
            with sim.lock:
                response.success, response.message = action()
            node.get_logger().info(f'gantry: {response.message}')
            return response
        return handle

    node.create_service(Trigger, 'gantry/lower', service(sim.lower))
    node.create_service(Trigger, 'gantry/release', service(sim.release))

    def on_fault(msg):
        word, _, value = msg.data.strip().partition(' ')
        try:
            if word == 'stall':
                sim.stall(float(value or 0.5))
            elif word == 'fill_crc':
                sim.states.fill_crc = value.strip() == 'on'
            elif word == 'bad_crc':
                sim.states.bad_crc += int(value or 1)
            else:
                raise ValueError(f'unknown fault {word!r} (stall <s>, fill_crc on|off, '
                                 'bad_crc <n>)')
        except ValueError as exc:
            node.get_logger().error(f'vendor_sim/fault {msg.data!r}: {exc}')
            return
        node.get_logger().warning(f'fault: {msg.data}')

    node.create_subscription(String, 'vendor_sim/fault', on_fault, 10)
    node.create_timer(0.1, lambda: pub_state.publish(String(data=json.dumps(sim.state()))),
                      clock=Clock(clock_type=ClockType.STEADY_TIME))
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    spin = threading.Thread(target=executor.spin, daemon=True)
    spin.start()
    stop = threading.Event()
    import signal
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    node.get_logger().info(
        f'vendor simulator: {args.scene} on DDS domain {args.domain} {args.interface}, '
        f'stepping at {args.rtf:g} x real time (dt {args.dt:g}), /clock published; band '
        f'{sim.band_state}; LowState_ crc {"filled" if args.fill_crc else "0 (the vendor)"}')
    try:
        sim.run(on_step, stop, args.duration)
    except KeyboardInterrupt:
        pass
    print(json.dumps(sim.state()), flush=True)
    executor.shutdown(timeout_sec=1.0)
    node.destroy_node()
    rclpy.try_shutdown()
    os._exit(0)   # the vendor's RecurrentThreads are not daemons and never end


if __name__ == '__main__':
    main()
