"""Run an ONNX policy with onnxruntime on the CPU, carrying recurrent state between steps.

The session uses a fixed, small thread count (a control loop shares the CPU with the rest of the
robot). Inputs other than the observation are recurrent state: each is paired with an output by
name (`h_in`/`h_out`, `c_in`/`c_out`, `in_h`/`out_h`, `x`/`x_out`, `..._in...`/`..._out...`) or,
failing that, by a unique matching shape; the pairs are fed back every step and zeroed on reset.
A policy whose state cannot be paired is refused at start-up with the names and shapes.

ONNX metadata (`custom_metadata_map`), when the exporter wrote it (mjlab / Isaac Lab style keys
`joint_names`, `default_joint_pos`, `action_scale`, `joint_stiffness`, `joint_damping`, as CSV or
JSON lists), is read and compared with the configuration by `check_metadata`.
"""
import json
import math
import os
from pathlib import Path
import re
import time

import numpy as np
import onnxruntime as ort

from simreal_ros.core.config import ConfigError

_DTYPES = {'tensor(float)': np.float32, 'tensor(double)': np.float64,
           'tensor(float16)': np.float16}


def _shape(dims, default=1):
    """Concrete shape of an ONNX value: symbolic / unknown dimensions become `default`."""
    return tuple(d if isinstance(d, int) and d > 0 else default for d in dims)


def _state_partner_names(name):
    """Output names a state input `name` may be paired with, most specific first."""
    out = []
    for pattern, repl in ((r'_in$', '_out'), (r'^in_', 'out_'), (r'_in_', '_out_'),
                          (r'In$', 'Out'), (r'in$', 'out'), (r'^in', 'out')):
        if re.search(pattern, name):
            out.append(re.sub(pattern, repl, name))
    out.append(name + '_out')
    out.append('next_' + name)
    return out


TORCH_EXPORT_HINT = (
    'export it to ONNX with torch, outside this package: m = torch.jit.load(FILE); '
    'torch.onnx.export(m, (obs,), \'policy.onnx\', input_names=[\'obs\'], '
    'output_names=[\'actions\'], opset_version=17). A recurrent policy (an LSTM/GRU keeping '
    'its state inside the module, as unitree_rl_gym\'s motion.pt) must take and give its state '
    'as explicit tensors: wrap it as forward(obs, h_in, c_in) -> (actions, h_out, c_out) and '
    'export with input_names [obs, h_in, c_in], output_names [actions, h_out, c_out]; '
    'policy_runner feeds h_out/c_out back and zeroes them on reset (docs/bring_your_own.md, '
    '"A TorchScript policy")')


def torch_file(path):
    """Return what kind of PyTorch file `path` is ('TorchScript module', 'torch.save '
    'checkpoint', 'pickle'), or '' when it is none (read without torch)."""
    import zipfile
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                names = z.namelist()
            tails = {n.split('/', 1)[1] if '/' in n else n for n in names}
            if 'constants.pkl' in tails or any(t.startswith('code/') for t in tails):
                return 'TorchScript module'
            if 'data.pkl' in tails:
                return 'torch.save checkpoint'
            return ''
        with open(path, 'rb') as f:
            head = f.read(2)
    except OSError:
        return ''
    return 'pickle' if head[:1] == b'\x80' and head[1:2] in (b'\x02', b'\x03', b'\x04',
                                                             b'\x05') else ''


def refuse_torch_file(path, what='policy_path'):
    """Raise ConfigError, saying how to export it, when `path` is a PyTorch file."""
    kind = torch_file(path)
    if kind:
        raise ConfigError(f'{what} {path} is a {kind} (PyTorch), not ONNX: '
                          + TORCH_EXPORT_HINT.replace('FILE', repr(Path(path).name)))


class PolicySession:
    """An onnxruntime session with the observation input, the action output and state pairs."""

    def __init__(self, path, threads=1, input_name='', output_name=''):
        self.path = str(path)
        if not os.path.isfile(self.path):
            raise ConfigError(f'policy_path {self.path!r} is not a file')
        refuse_torch_file(self.path)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = int(threads)
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(self.path, sess_options=opts,
                                                providers=['CPUExecutionProvider'])
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises several types
            raise ConfigError(f'cannot load the ONNX policy {self.path}: {exc}') from exc
        inputs = {i.name: i for i in self.session.get_inputs()}
        outputs = {o.name: o for o in self.session.get_outputs()}
        self._pair_io(inputs, outputs, input_name, output_name)
        self.metadata = dict(self.session.get_modelmeta().custom_metadata_map)
        self.reset()
        self.warm_up_s = self._warm_up()

    def _warm_up(self):
        """Run the policy once on zeros, before any control loop calls it; return its time.

        onnxruntime does part of its work on the first run (the memory arena, the kernels'
        first use, the library's code pages read in): bench/policy_staleness.py saw the G1
        walk's first inference take 67 ms beside two busy loops (0.4 ms after), and the
        command it made reached the supervisor 71 ms old, past its 60 ms policy timeout.
        The output is dropped and the recurrent state zeroed again. A policy that cannot run
        on an observation of its declared shape is refused here, not in the loop."""
        t0 = time.perf_counter()
        try:
            self.session.run(self._outputs, {self.input_name: np.zeros(self._obs_shape,
                                                                        self._in_dtype),
                                             **self.state})
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises several types
            raise ConfigError(f'{self.path}: the policy does not run on an observation of '
                              f'its input shape {list(self._obs_shape)}: {exc}') from exc
        finally:
            self.reset()
        return time.perf_counter() - t0

    def _describe(self, values):
        return ', '.join(f'{v.name} {list(v.shape)} {v.type}' for v in values.values())

    def _pair_io(self, inputs, outputs, input_name, output_name):
        io = f'inputs: {self._describe(inputs)}; outputs: {self._describe(outputs)}'
        for v in list(inputs.values()) + list(outputs.values()):
            if v.type not in _DTYPES:
                raise ConfigError(f'{self.path}: {v.name} has type {v.type}; only float tensors '
                                  f'are supported ({io})')
        if input_name:
            if input_name not in inputs:
                raise ConfigError(f'input_name {input_name!r} is not an input of {self.path} '
                                  f'({io})')
            obs = input_name
        elif len(inputs) == 1:
            obs = next(iter(inputs))
        else:
            candidates = [n for n in inputs if n in ('obs', 'observation', 'observations',
                                                     'input', 'policy')]
            if len(candidates) != 1:
                raise ConfigError(f'{self.path} has several inputs and none is named obs; set '
                                  f'input_name ({io})')
            obs = candidates[0]
        state_inputs = [n for n in inputs if n != obs]
        pairs = []
        free_out = dict(outputs)
        for name in state_inputs:
            partner = next((p for p in _state_partner_names(name) if p in free_out), None)
            if partner is not None:
                pairs.append((name, partner))
                free_out.pop(partner)
        unpaired = [n for n in state_inputs if n not in dict(pairs)]
        for name in unpaired:  # by unique shape among the outputs left (excluding the action)
            shape = _shape(inputs[name].shape)
            same = [o for o in free_out if o != output_name
                    and _shape(free_out[o].shape) == shape]
            if len(same) != 1:
                raise ConfigError(f'{self.path}: cannot pair recurrent state input {name!r} '
                                  f'{list(shape)} with an output (name it X_in/X_out or give '
                                  f'it a unique shape; {io})')
            pairs.append((name, same[0]))
            free_out.pop(same[0])
        if output_name:
            if output_name not in free_out:
                raise ConfigError(f'output_name {output_name!r} is not a free output of '
                                  f'{self.path} ({io})')
            act = output_name
        elif len(free_out) == 1:
            act = next(iter(free_out))
        else:
            candidates = [n for n in free_out if n in ('actions', 'action', 'output', 'mu')]
            if len(candidates) != 1:
                raise ConfigError(f'{self.path}: cannot tell the action output among '
                                  f'{sorted(free_out)}; set output_name ({io})')
            act = candidates[0]
        for i_name, o_name in pairs:
            si, so = _shape(inputs[i_name].shape), _shape(outputs[o_name].shape)
            if si != so:
                raise ConfigError(f'{self.path}: state {i_name} {list(si)} and {o_name} '
                                  f'{list(so)} have different shapes')
        self.input_name = obs
        self.output_name = act
        self.state_pairs = pairs
        self._in_dtype = _DTYPES[inputs[obs].type]
        self._obs_shape = _shape(inputs[obs].shape)
        obs_dims = inputs[obs].shape
        self.obs_size = obs_dims[-1] if obs_dims and isinstance(obs_dims[-1], int) else None
        act_dims = outputs[act].shape
        self.action_size = act_dims[-1] if act_dims and isinstance(act_dims[-1], int) else None
        self._state_spec = {i: (_shape(inputs[i].shape), _DTYPES[inputs[i].type])
                            for i, _ in pairs}
        self._outputs = [act] + [o for _, o in pairs]

    @property
    def recurrent(self):
        return bool(self.state_pairs)

    def reset(self):
        """Zero the recurrent state."""
        self.state = {name: np.zeros(shape, dtype) for name, (shape, dtype)
                      in self._state_spec.items()}

    def run(self, observation):
        """Return the action (float64, 1-D) for one observation; carry the recurrent state.

        The state advances only when every output is finite, so one bad step does not poison
        the next; the caller must never use a non-finite action.
        """
        obs = np.asarray(observation, dtype=self._in_dtype).reshape(self._obs_shape)
        feeds = {self.input_name: obs}
        feeds.update(self.state)
        results = self.session.run(self._outputs, feeds)
        action = np.asarray(results[0], dtype=float).reshape(-1)
        new_state = {i: r for (i, _), r in zip(self.state_pairs, results[1:])}
        if np.all(np.isfinite(action)) and all(np.all(np.isfinite(v))
                                               for v in new_state.values()):
            self.state = new_state
        return action


def _parse_list(text):
    text = str(text).strip()
    try:
        value = json.loads(text)
    except ValueError:
        value = [s.strip() for s in text.split(',') if s.strip()]
    return value if isinstance(value, list) else [value]


def check_metadata(metadata, path, joint_names, default_position=None, action_scale=None,
                   kp=None, kd=None, atol=1e-3):
    """Compare ONNX metadata with the configuration.

    Return (problems, notes): problems are mismatches that must stop the start-up, notes say
    what was checked or absent.
    """
    problems, notes = [], []
    if not metadata:
        return problems, [f'{path} has no metadata; the configuration is not cross-checked']
    if 'joint_names' in metadata:
        names = [str(n) for n in _parse_list(metadata['joint_names'])]
        if names != list(joint_names):
            problems.append(f'joint order: the policy was exported with {names}, the config '
                            f'policy_joint_names is {list(joint_names)}')
        else:
            notes.append('joint_names match the metadata')
    numeric = (('default_joint_pos', default_position, 'default_position'),
               ('action_scale', action_scale, 'action.scale'),
               ('joint_stiffness', kp, 'kp (policy order)'),
               ('joint_damping', kd, 'kd (policy order)'))
    for key, configured, param in numeric:
        if key not in metadata:
            continue
        try:
            meta = np.asarray([float(v) for v in _parse_list(metadata[key])])
        except ValueError:
            problems.append(f'metadata {key} is not a list of numbers: {metadata[key]!r}')
            continue
        if configured is None or np.asarray(configured).size == 0:
            notes.append(f'metadata {key} present but {param} not configured: not checked')
            continue
        conf = np.asarray(configured, dtype=float).reshape(-1)
        if meta.size == 1:
            meta = np.full(conf.size, meta[0])
        if conf.size == 1:
            conf = np.full(meta.size, conf[0])
        if meta.size != conf.size or not np.allclose(meta, conf, atol=atol, rtol=1e-3):
            problems.append(f'{param} is {conf.tolist()} but the policy metadata {key} is '
                            f'{meta.tolist()}')
        else:
            notes.append(f'{param} matches the metadata {key}')
    return problems, notes


def _in_policy_order(values, driver, to_policy):
    """Return per-joint `values` given in the driver's order (joint_names) in the policy's.

    One value, none, or a list that is not one per driver joint is returned as it is (the
    comparison with the metadata then says what does not fit).
    """
    if values is None or to_policy is None:
        return values
    arr = np.asarray(values, dtype=float).reshape(-1)
    return arr[to_policy] if arr.size == len(driver) else values


# The policy_runner parameters other than the observation terms: (name, default, description,
# low, high). None = not set (dynamically typed). The node declares these with descriptors.
RUNNER_PARAMETERS = (
    ('joint_names', None, "the driver's joint names (usually from the '/**' section)", None, None),
    ('policy_path', '', 'ONNX policy file: absolute, package://simreal_ros/..., or relative to '
     'the folder of the parameter file that sets it (then the working directory)',
     None, None),
    ('policy_joint_names', None, "the policy's joint order (default: joint_names)", None, None),
    ('default_position', None, 'default pose, policy joint order (rad)', None, None),
    ('rate_hz', 100.0, 'policy rate on ROS time (Hz)', 1.0, 2000.0),
    ('threads', 1, 'onnxruntime intra-op threads', 1, 8),
    ('input_name', '', 'ONNX observation input (empty: the only / "obs" input)', None, None),
    ('output_name', '', 'ONNX action output (empty: the only non-state output)', None, None),
    ('observation.terms', None, 'observation terms, in order', None, None),
    ('observation.clip', 0.0, 'clip of the whole observation (0 = none)', 0.0, None),
    ('action.mode', 'position', "'position' (targets for the driver PD) or 'effort'", None,
     None),
    ('action.scale', 1.0, 'action scale: one value or one per policy joint', None, None),
    ('action.clip', 0.0, 'clip of the raw action before scaling (0 = none)', 0.0, None),
    ('kp', None, "the driver's PD gains, joint_names order (usually from the '/**' section); "
     'checked in policy order against the ONNX metadata joint_stiffness', None, None),
    ('kd', None, "the driver's PD damping, joint_names order; checked in policy order against "
     'the ONNX metadata joint_damping', None, None),
)


class PolicyController:
    """Observation builder + ONNX session + action processor, checked against each other."""

    def __init__(self, params, source='policy_runner', base_dir=None, params_file=None):
        from simreal_ros.core.actions import ActionProcessor
        from simreal_ros.core.config import resolve_path
        from simreal_ros.core.observation import JointMap, ObservationBuilder

        driver = params.get('joint_names') or []
        policy_names = params.get('policy_joint_names') or driver
        self.joint_map = JointMap(policy_names, driver, source)
        n = self.joint_map.n
        default = params.get('default_position')
        default = np.zeros(n) if default is None else np.asarray(default, float).reshape(-1)
        if default.size != n or not np.all(np.isfinite(default)):
            raise ConfigError(f'{source}: default_position needs {n} finite values (policy '
                              f'joint order), got {default.tolist()}')
        self.default_position = default
        # A relative policy_path is relative to the parameter file that sets it (base_dir:
        # its folder), as graph.build_graph checks it; the nodes started by the graph get the
        # absolute path it resolved.
        where = f' (set in {params_file})' if params_file else ''
        if base_dir is None and params_file:
            base_dir = Path(params_file).parent
        path = resolve_path(params.get('policy_path'),
                            what=f'{source}: parameter policy_path{where}', relative_to=base_dir)
        self.session = PolicySession(path, int(params.get('threads') or 1),
                                     params.get('input_name') or '',
                                     params.get('output_name') or '')
        self.builder = ObservationBuilder.from_params(params, n, default, source)
        self.builder.check_length(self.session.obs_size,
                                  f'{self.session.input_name!r} of {path}')
        if self.session.action_size is not None and self.session.action_size != n:
            raise ConfigError(f'{path}: the action output {self.session.output_name!r} has '
                              f'{self.session.action_size} values but policy_joint_names has '
                              f'{n} joints')
        self.actions = ActionProcessor(n, params.get('action.mode') or 'position',
                                       params.get('action.scale', 1.0),
                                       params.get('action.clip') or 0.0, default, source)
        # kp/kd are the driver's gains in joint_names order (the robot file's '/**' section);
        # the exporters' joint_stiffness/joint_damping are in the policy's joint order.
        to_policy = self.joint_map.index_from(driver) if driver else None
        problems, self.metadata_notes = check_metadata(
            self.session.metadata, path, self.joint_map.policy_names, default,
            self.actions.scale, _in_policy_order(params.get('kp'), driver, to_policy),
            _in_policy_order(params.get('kd'), driver, to_policy))
        if problems:
            raise ConfigError(f'{source}: the configuration does not match the policy '
                              'metadata: ' + '; '.join(problems))
        self.path = path
        self.command_names = self.joint_map.command_names

    @property
    def needs_imu(self):
        return self.builder.needs_imu

    def reset(self, origin_time=0.0):
        """Zero recurrent state, last action and history."""
        self.session.reset()
        self.builder.reset(origin_time)

    def inputs(self, time, names, position, velocity, imu_xyzw=None, angular_velocity=None,
               command=None):
        """Build Inputs from message fields (driver names; ROS quaternion order x, y, z, w)."""
        from simreal_ros.core.observation import Inputs
        vel = velocity if len(velocity) else np.zeros(len(names))
        orientation = None
        if imu_xyzw is not None:
            x, y, z, w = imu_xyzw
            orientation = np.array([w, x, y, z], dtype=float)
        return Inputs(float(time), self.joint_map.to_policy(names, position),
                      self.joint_map.to_policy(names, vel), orientation,
                      None if angular_velocity is None else np.asarray(angular_velocity, float),
                      None if command is None else np.asarray(command, float))

    def step(self, inputs):
        """Return (targets in command_names order, raw action); raise ValueError when unusable.

        A non-finite action raises and changes nothing (last action, recurrent state).
        """
        obs = self.builder.build(inputs)
        if not np.all(np.isfinite(obs)):
            raise ValueError('the observation is not finite (check joint_states and imu)')
        action = self.session.run(obs)
        targets = self.actions.process(action)  # raises on non-finite
        self.builder.set_last_action(action)
        return self.joint_map.to_command(targets), action


class StartPhase:
    """How the policy takes over the robot: the measured pose, then the default pose, then it.

    While safety_supervisor does not admit the policy (safe mode, e-stop, SysID, or no
    heartbeat from it), the command is the measured pose: forwarding (re)starts only with a
    command near the measured state, and this one always is. Once admitted, the command
    moves from the pose measured then to the policy's default pose over `duration_s` (a
    smoothstep: no velocity jump at either end), and the policy then starts as a training
    episode does, at its default pose with zero last action and history (the caller resets
    it at the handover). Unitree's deploy scripts and rl_sar do the same (move to the default
    pose, then the policy). `duration_s` 0 turns it off: the policy's own output always.
    Position actions only; the targets are in command order.
    """

    def __init__(self, duration_s, default_command):
        self.duration = float(duration_s)
        self.default = np.asarray(default_command, dtype=float)
        self.phase = 'wait'      # wait -> ease -> policy; back to wait when not admitted
        self.start = None        # (time, pose) the ease started from
        self.eases = 0           # eases started (a restart after every safe spell)

    @property
    def active(self):
        return self.duration > 0.0

    def restart(self):
        self.phase, self.start = 'wait', None

    def command(self, now, admitted, measured):
        """Return (targets or None when the policy commands, handover): handover is True once,
        on the tick the policy takes over (reset it first). `measured` (command order) may be
        None while admitted in the policy phase: it is not used there."""
        if not self.active:
            return None, False
        if not admitted:
            self.restart()
            return np.array(measured, dtype=float), False
        if self.phase == 'wait':
            self.phase, self.start = 'ease', (float(now), np.array(measured, dtype=float))
            self.eases += 1
        if self.phase == 'ease':
            t0, q0 = self.start
            s = min(max((now - t0) / self.duration, 0.0), 1.0)
            if s < 1.0:
                s = s * s * (3.0 - 2.0 * s)
                return q0 + s * (self.default - q0), False
            self.phase = 'policy'
            return None, True
        return None, False


class CommandLimits:
    """Clip a velocity command (vx, vy, wz) to configured ranges, counting clipped values."""

    def __init__(self, low, high, source='policy_runner'):
        self.low = np.asarray(low, float).reshape(-1)
        self.high = np.asarray(high, float).reshape(-1)
        if (self.low.shape != (3,) or self.high.shape != (3,) or not np.all(self.low <= self.high)
                or not np.all(np.isfinite(self.low)) or not np.all(np.isfinite(self.high))):
            raise ConfigError(f'{source}: cmd_vel_min / cmd_vel_max need three finite values '
                              f'each (vx, vy, wz), min <= max; got {self.low.tolist()} / '
                              f'{self.high.tolist()}')
        self.clipped = 0

    def apply(self, vx, vy, wz):
        """Return the clipped command as a tuple; raise ValueError when not finite."""
        raw = np.array((vx, vy, wz), dtype=float)
        if not np.all(np.isfinite(raw)):
            raise ValueError(f'cmd_vel not finite: {raw.tolist()}')
        cmd = np.clip(raw, self.low, self.high)
        self.clipped += int(np.count_nonzero(cmd != raw))
        return tuple(cmd.tolist())


class _Histogram:
    """Counts of a positive series in log-spaced bins (100 a decade, 1e-3 to 1e5): O(1) to
    add to, a few microseconds to read. A percentile is its bin's upper edge (at most 2.3 %
    above the exact value, never above the maximum); the maximum is exact."""

    LO = 1e-3
    PER_DECADE = 100
    DECADES = 8

    def __init__(self):
        self.counts = np.zeros(self.DECADES * self.PER_DECADE + 2, np.int64)
        self.n = 0
        self.max = -math.inf

    def append(self, value):
        if value > self.LO:
            i = min(int(math.log10(value / self.LO) * self.PER_DECADE) + 1,
                    len(self.counts) - 1)
        else:
            i = 0
        self.counts[i] += 1
        self.n += 1
        if value > self.max:
            self.max = value

    def __len__(self):
        return self.n

    def percentile(self, q):
        i = int(np.searchsorted(np.cumsum(self.counts), q / 100.0 * self.n))
        edge = self.LO * 10.0 ** (i / self.PER_DECADE)
        return min(edge, self.max)


class LoopTiming:
    """Per-tick timing of a control loop, summarised as percentiles for diagnostics/benches.

    The percentiles cover every sample since start-up, from log-spaced histograms.
    summary() runs on the loop's executor thread once a second, so it must cost next to
    nothing: percentiles of deques of 100,000 samples took 22 ms (a late tick every second
    after 17 minutes at 100 Hz), of 6,000 samples 1 ms.
    """

    # period_err_ms: the timer's ticks; publish_period_err_ms: the commands' publication
    # (with align_mode 'await' a command leaves when its joint_states message arrives).
    KEYS = ('period_err_ms', 'publish_period_err_ms', 'inference_us', 'obs_age_ms',
            'e2e_latency_ms')

    def __init__(self, period_s):
        self.period_s = float(period_s)
        self.samples = {k: _Histogram() for k in self.KEYS}
        self.deadline_misses = 0
        self.misses = {'late_tick': 0, 'overrun': 0, 'no_command': 0}   # by cause
        self._last_tick = None

    def tick(self, t):
        """Record a tick that started at time t (s); count a miss when a period was skipped."""
        if self._last_tick is not None:
            interval = t - self._last_tick
            self.samples['period_err_ms'].append(abs(interval - self.period_s) * 1e3)
            if interval > 1.5 * self.period_s:
                self.miss('late_tick', int(round(interval / self.period_s)) - 1)
        self._last_tick = t

    def restart(self):
        """Forget the previous tick (after a pause, e.g. while disabled)."""
        self._last_tick = None

    def record(self, key, value):
        self.samples[key].append(float(value))

    def overrun(self, compute_s):
        """Count a miss when one tick's work took longer than the period."""
        if compute_s > self.period_s:
            self.miss('overrun')

    def miss(self, cause, n=1):
        """Count n deadline misses: 'late_tick' (the timer skipped a period), 'overrun' (a
        tick's work outlasted the period) or 'no_command' (a tick ended without computing)."""
        self.misses[cause] += n
        self.deadline_misses += n

    def summary(self):
        """Return {key_p50, key_p99, key_max} for every key with samples, plus misses."""
        out = {'deadline_misses': self.deadline_misses}
        out.update({f'misses_{k}': v for k, v in self.misses.items()})
        for key, hist in self.samples.items():
            if len(hist):
                out[key + '_p50'] = float(hist.percentile(50))
                out[key + '_p99'] = float(hist.percentile(99))
                out[key + '_max'] = float(hist.max)
        return out


class PhaseAligner:
    """Phase of a timer-driven loop against a faster sensor stream (joint_states).

    A 100 Hz tick sampling a 500 Hz stream at an arbitrary phase uses a message that waited
    0 to 2 ms for it. The arrival times (this process's clock) folded onto the stream's period
    give the arrival phase and its spread. The loop stays timer-driven (its period is the
    timer's); only its phase is chosen, once at enable and again when it drifts (clock drift, a
    driver restart). Two placements:

    - 'after' (`lead_s` None): each tick falls `margin` after the `quantile` of the spread, by
      which nearly every message of its period has arrived;
    - 'await' (`lead_s` > 0): each tick falls `lead_s` before (100 - `quantile`) % of the
      arrivals and the loop computes when that message arrives (`should_await`), so the wait
      for a late message is the loop's, not the message's.

    `offset` is the tick's time after the median arrival phase (negative when awaiting).
    """

    def __init__(self, margin_s=0.0002, quantile=99.0, min_samples=50, keep=500,
                 window=100, min_lead_s=0.0002, lead_s=None):
        from collections import deque
        self.margin = float(margin_s)
        self.quantile = float(quantile)
        self.min_samples = int(min_samples)
        self.min_lead = float(min_lead_s)
        self.lead = None if lead_s is None else float(lead_s)
        self.arrivals = deque(maxlen=keep)
        self.stamps = deque(maxlen=keep)
        self.delays = deque(maxlen=window)
        self.offset = None      # the aligned tick's time after the median arrival phase (s)
        # numpy's first median and least-squares fit load code (~10 ms): here, not at enable.
        x = np.arange(3.0)
        np.polyfit(x, x, 1), np.median(x), np.percentile(x, 1)
        self.period = None      # the stream period measured at the last alignment (s)

    def on_state(self, arrival, stamp=None):
        """Record the arrival time of one message (s, a monotonic clock) and its header stamp."""
        self.arrivals.append(float(arrival))
        self.stamps.append(math.nan if stamp is None else float(stamp))

    def ready(self):
        return len(self.arrivals) >= self.min_samples

    def stream_period(self):
        a = np.fromiter(self.arrivals, float)
        return float(np.median(np.diff(a))) if len(a) > 1 else None

    def next_tick(self, now):
        """Return the time (the arrivals' clock) of the next aligned tick (> now + min_lead)."""
        if not self.ready():
            return None
        a = np.fromiter(self.arrivals, float)
        guess = self.stream_period()
        if not guess or guess <= 0:
            return None
        # Message k of the stream arrives at c + period * k: numbered by the header stamps
        # (regular even when the arrivals come in bursts; a lost message skips a number) or,
        # without stamps, by the arrival intervals, then fitted. The median interval alone is
        # off by a few microseconds with jitter, which folds into a phase error of hundreds of
        # microseconds over a few hundred messages.
        st = np.fromiter(self.stamps, float)
        step = np.diff(st)
        if np.all(np.isfinite(step)) and np.median(step) > 0:
            k = np.concatenate([[0.0], np.cumsum(np.maximum(np.round(
                step / np.median(step)), 1))])
        else:
            k = np.concatenate([[0.0], np.cumsum(np.maximum(np.round(np.diff(a) / guess), 1))])
        period, c = np.polyfit(k, a, 1)
        if not period > 0:
            return None
        residual = a - (c + period * k)
        # Centred on the median arrival (a fifth of the messages a stream period late pull
        # the fitted line, a mean, after most arrivals) and wrapped to +- half a period.
        median = float(np.median(residual))
        spread = (residual - median + 0.5 * period) % period - 0.5 * period
        if self.lead is not None:   # before (nearly) every arrival
            self.offset = float(np.percentile(spread, 100.0 - self.quantile)) - self.lead
        else:                       # after (nearly) every arrival
            self.offset = float(np.percentile(spread, self.quantile)) + self.margin
        self.period = period = float(period)
        t = float(c + median + period * k[-1]) + self.offset
        t += period * math.ceil((now + self.min_lead - t) / period)
        self.delays.clear()
        return float(t)

    def should_await(self, tick, newest_arrival):
        """'await' placement: True when the tick should compute on the next message.

        That is when the newest message arrived more than `lead_s` before the tick: it is an
        earlier period's (arrivals here spread over a millisecond and more, in clusters, so
        half a stream period does not tell). Otherwise it is the one this tick was placed
        for, come early or met by a late timer. Whatever the phase, a tick so computes with
        a message at most `lead_s` old or on the next one's arrival: the phase only sets how
        long the tick waits. (The caller bounds the wait: messages come in bursts and gaps
        of several periods on a busy machine, and a stream may stop.)
        """
        if self.lead is None or self.period is None or newest_arrival is None:
            return False
        return tick - newest_arrival > self.lead

    def on_tick(self, sampling_delay):
        """Record the tick's start minus the arrival of the message it used (s); True = re-align.

        Negative when the tick awaited the message. 'after' re-aligns when the median over a
        full window shows the messages waiting a quarter of a stream period longer than the
        placement implies. 'await' never does: whatever the phase, a tick uses a message at
        most `lead_s` old or waits for the next, so drift costs no latency, only waiting,
        while each re-alignment costs a period error, and a stream whose period is 0.1 %
        off the timer's (a simulator a little slower than real time) drifts by a stream
        period every two seconds.
        """
        self.delays.append(float(sampling_delay))
        if (self.lead is not None or self.offset is None
                or len(self.delays) < self.delays.maxlen):
            return False
        median = float(np.median(np.fromiter(self.delays, float)))
        return median > self.offset + 0.25 * (self.period or 0.0)
