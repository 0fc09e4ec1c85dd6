"""Property tests of the safety limit filter: any input, any state -> within every stage limit.

Each hypothesis example (SIMREAL_PROPERTY_CASES of them, default 300) is checked together with
VARIANTS numpy-drawn variants; bench/safety_faults.py runs the same property over >= 100k cases.
"""
import math
import os

from hypothesis import HealthCheck, Phase, given, settings, strategies as st
import numpy as np
import pytest

from simreal_ros.core.safety import (DEFAULT_STAGES, Limits, Rejected, filter_command,
                                     validate_command)
from simreal_ros.core.safety.check import limit_violations, unchanged_when_within

CASES = int(os.environ.get('SIMREAL_PROPERTY_CASES', '300'))  # hypothesis examples
VARIANTS = 30  # numpy-drawn variants checked per hypothesis example
STATS = {'cases': 0, 'rejected': 0, 'filtered': 0, 'sup_forwarded': 0, 'sup_safe': 0}

wild = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(-1e6, 1e6),
    st.floats(-5.0, 5.0),
    st.sampled_from([0.0, -0.0, 1e308, -1e308, 5e-324, math.nan, math.inf, -math.inf]),
)
finite_state = st.floats(-20.0, 20.0)


@st.composite
def limits_st(draw):
    n = draw(st.integers(1, 6))
    names = tuple(f'j{k}' for k in range(n))
    pos = st.floats(1e-6, 500.0)
    lo = np.array(draw(st.lists(st.floats(-3.0, -0.01), min_size=n, max_size=n)))
    hi = np.array(draw(st.lists(st.floats(0.01, 3.0), min_size=n, max_size=n)))

    def arr(s):
        return np.array(draw(st.lists(s, min_size=n, max_size=n)))
    return Limits.from_mapping(names, {
        'kp': arr(st.one_of(st.just(0.0), pos)), 'kd': arr(st.one_of(st.just(0.0),
                                                                     st.floats(1e-6, 20.0))),
        'position_lower': lo, 'position_upper': hi,
        'velocity_limit': arr(st.floats(0.05, 50.0)), 'torque_limit': arr(st.floats(0.05, 300.0)),
        'max_target_rate': arr(st.floats(0.05, 100.0))})


@st.composite
def case_st(draw):
    limits = draw(limits_st())
    n = len(limits.names)
    scale = draw(st.one_of(st.sampled_from(DEFAULT_STAGES), st.floats(0.001, 1.0)))
    q = np.array(draw(st.lists(finite_state, min_size=n, max_size=n)))
    dq = np.array(draw(st.lists(st.floats(-200.0, 200.0), min_size=n, max_size=n)))
    prev = np.array(draw(st.lists(st.one_of(st.just(math.nan), finite_state),
                                  min_size=n, max_size=n)))
    dt = draw(st.sampled_from([0.0, 0.002, 0.01]) | st.floats(0.0, 0.05))
    # Names: usually a shuffled subset of the robot's, sometimes unknown or duplicated.
    subset = draw(st.permutations(list(limits.names)))[:draw(st.integers(0, n))]
    names = list(subset)
    if draw(st.integers(0, 9)) == 0:
        names.append(draw(st.sampled_from(['bogus', ''] + list(limits.names))))
    m = len(names)

    def field():
        kind = draw(st.integers(0, 9))
        if kind <= 1:
            return []
        if kind == 2:  # wrong length now and then
            return draw(st.lists(wild, min_size=0, max_size=m + 2))
        if kind == 3:
            return draw(st.lists(wild, min_size=m, max_size=m))
        return draw(st.lists(st.floats(-10.0, 10.0), min_size=m, max_size=m))
    return limits, scale, q, dq, prev, dt, names, field(), field(), field()


SPECIAL = np.array([np.nan, np.inf, -np.inf, 1e308, -1e308, 1e12, -1e12, 0.0])


def numpy_cases(case, seed, k):
    """Yield k more cases around a hypothesis case (same limits), drawn with numpy.

    Hypothesis drawing is the slow part (~8 ms a case); these variants keep its limits and stage
    and vary state, previous target, names (shuffled subsets, unknown, duplicated) and fields
    (in range, huge, NaN, inf, wrong length), so the bench reaches >= 100k checked cases.
    """
    limits, scale = case[0], case[1]
    names_all = list(limits.names)
    n = len(names_all)
    rng = np.random.default_rng(seed)
    for _ in range(k):
        q = rng.uniform(-5, 5, n) * rng.choice([0.1, 1.0, 4.0])
        dq = rng.uniform(-1, 1, n) * rng.choice([0.0, 1.0, 10.0, 200.0])
        prev = np.where(rng.random(n) < 0.3, np.nan, q + rng.normal(0, 0.5, n))
        dt = float(rng.choice([0.0, 0.002, rng.uniform(0, 0.05)]))
        names = list(rng.permutation(names_all)[:rng.integers(1, n + 1)])
        r = rng.random()
        if r < 0.04:
            names.append('bogus')
        elif r < 0.08:
            names.append(names[0])
        m = len(names)

        def field():
            kind = rng.integers(0, 10)
            if kind <= 2:
                return []
            if kind == 3:
                return rng.uniform(-3, 3, int(rng.integers(0, m + 3))).tolist()
            values = rng.uniform(-1, 1, m) * rng.choice([0.5, 5.0, 50.0, 1e6], m)
            if kind == 4:
                values[rng.integers(0, m)] = rng.choice(SPECIAL)
            return values.tolist()
        yield limits, scale, q, dq, prev, dt, names, field(), field(), field()


def malformed(names, fields, joint_names):
    """Say (independently of the filter) whether a command must be rejected as a whole."""
    if not names or len(set(names)) != len(names) or any(n not in joint_names for n in names):
        return True
    present = [f for f in fields if len(f)]
    if not present:
        return True
    return any(len(f) != len(names) or not all(math.isfinite(v) for v in f) for f in present)


def check_case(case):
    """Assert the filter's contract for one case; return 'rejected' or 'filtered'."""
    limits, scale, q, dq, prev, dt, names, pos, vel, eff = case
    STATS['cases'] += 1
    must_reject = malformed(names, (pos, vel, eff), limits.names)
    try:
        cmd = validate_command(names, pos, vel, eff, limits.names)
    except Rejected as exc:
        assert must_reject, f'valid command rejected: {exc}'
        assert str(exc), 'a rejection must carry a reason'
        STATS['rejected'] += 1
        return 'rejected'
    assert not must_reject, f'malformed command accepted: {names} {pos} {vel} {eff}'
    out, clips = filter_command(limits, scale, cmd, q, dq, prev, dt)
    bad = limit_violations(limits, scale, cmd, out, q, dq, prev, dt)
    assert not bad, bad
    altered = unchanged_when_within(limits, scale, cmd, out, q, dq, prev, dt)
    assert altered is None, altered
    # Every change the filter made is counted for that joint.
    for key in ('position', 'velocity', 'effort'):
        a, b = getattr(cmd, key), getattr(out, key)
        if a is not None:
            changed = a != b
            counted = np.any(np.stack(list(clips.values())), axis=0)
            assert np.all(counted[changed]), f'{key} changed without a clip counted'
    STATS['filtered'] += 1
    return 'filtered'


def make_property(examples, variants=VARIANTS, bench=False):
    """Return the property over `examples` hypothesis examples, each with `variants` more.

    The returned function takes no arguments; each example checks 1 + variants cases.
    """
    kwargs = dict(max_examples=examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
    if bench:
        kwargs.update(phases=[Phase.generate, Phase.shrink])

    @settings(**kwargs)
    @given(case_st(), st.integers(0, 2**32 - 1))
    def prop(case, seed):
        check_case(case)
        for variant in numpy_cases(case, seed, variants):
            check_case(variant)
    return prop


def test_filter_output_respects_every_stage_limit_for_any_input():
    before = dict(STATS)
    make_property(CASES)()
    assert STATS['cases'] - before['cases'] == CASES * (1 + VARIANTS)
    # The generators reach both sides: whole-command rejections and the filter.
    assert STATS['filtered'] - before['filtered'] > CASES
    assert STATS['rejected'] - before['rejected'] > CASES // 10


# -- the whole supervisor: any sequence of inputs and operator requests ----------------------
SUP_NAMES = ['j0', 'j1', 'j2']
event_st = st.one_of(
    st.tuples(st.just('state'), st.lists(st.floats(-3, 3), min_size=3, max_size=3),
              st.lists(st.floats(-8, 8), min_size=3, max_size=3)),
    st.tuples(st.just('command'), st.sampled_from(['policy', 'sysid']),
              st.permutations(SUP_NAMES), st.lists(wild, min_size=0, max_size=3),
              st.lists(wild, min_size=0, max_size=3), st.lists(wild, min_size=0, max_size=3)),
    st.tuples(st.just('command'), st.just('policy'), st.just(SUP_NAMES),
              st.lists(st.floats(-2, 2), min_size=3, max_size=3), st.just([]), st.just([])),
    st.tuples(st.just('state'), st.lists(st.floats(-1, 1), min_size=3, max_size=3),
              st.lists(st.floats(-1, 1), min_size=3, max_size=3)),
    st.tuples(st.just('tick'), st.sampled_from([0.001, 0.002, 0.002, 0.01, 0.2])),
    # Glitched measurements: wild values, duplicated, missing or shuffled names.
    st.tuples(st.just('raw_state'),
              st.sampled_from([SUP_NAMES, ['j0', 'j0', 'j1'], ['j0', 'j1'], ['j2', 'j0', 'j1'],
                               ['j0', 'j1', 'j2', 'j2']]),
              st.lists(wild, min_size=2, max_size=4), st.lists(wild, min_size=2, max_size=4)),
    # A healthy control cycle (fresh state, fresh command, tick): reaches forwarding. The
    # command is near the state (forwarding starts only within reset_tolerance of it and
    # within the lowest stage's torque limit: 10 mrad at most, 1 N*m at kp 100) or
    # anywhere in [-2, 2] (the limits then work on a far target).
    st.tuples(st.just('cycle'), st.lists(st.floats(-1, 1), min_size=3, max_size=3),
              st.lists(st.floats(-2, 2), min_size=3, max_size=3), st.booleans()),
    # A spell of steady control (the measured pose held, a command near it, ticks): the
    # forwarding runs that the wild events then interrupt.
    st.tuples(st.just('steady'), st.integers(1, 10),
              st.lists(st.floats(-1, 1), min_size=3, max_size=3)),
    st.tuples(st.just('request'), st.sampled_from(['estop', 'reset', 'advance', 'sysid',
                                                   'policy'])),
)


def supervisor_config():
    from simreal_ros.core.safety import SupervisorConfig
    return SupervisorConfig.from_params(dict(
        joint_names=SUP_NAMES, kp=[100.0, 50.0, 0.0], kd=[2.0, 1.0, 3.0],
        position_lower=[-1.0, -2.0, -0.5], position_upper=[1.0, 0.5, 0.5],
        velocity_limit=[2.0, 3.0, 1.0], torque_limit=[20.0, 10.0, 5.0],
        max_target_rate=[5.0, 5.0, 5.0], trip_velocity=[6.0, 6.0, 6.0],
        stages=[0.1, 0.5, 1.0], stage_dwell_s=[0.0], policy_timeout_s=0.05,
        sysid_timeout_s=0.05, joint_states_timeout_s=0.05, reject_trip_count=4,
        check_stamps=True))


def make_supervisor_property(examples, bench=False):
    """Return the whole-supervisor property over `examples` event sequences."""
    kwargs = dict(max_examples=examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
    if bench:
        kwargs.update(phases=[Phase.generate, Phase.shrink])

    @settings(**kwargs)
    @given(st.lists(event_st, min_size=1, max_size=60))
    def prop(events):
        supervisor_sequence(events)
    return prop


def supervisor_sequence(events):
    """Feed one sequence of events to a fresh supervisor; assert its contract throughout."""
    from simreal_ros.core.safety import Supervisor
    STATS['sequences'] = STATS.get('sequences', 0) + 1
    sup = Supervisor(supervisor_config(), 0.0)
    t = 1.0
    changed = np.full(len(SUP_NAMES), np.nan)   # when each forwarded target last moved
    # ... and where it then stood on the source's clock (commands are stamped as they arrive:
    # a command's stamp is its arrival time, the clock runs on from there), whether it was
    # short of its command, and when each source's latest command was taken.
    changed_src = np.full(len(SUP_NAMES), np.nan)
    lagging = np.zeros(len(SUP_NAMES), dtype=bool)
    taken = {}
    expanded = []
    for ev in events:
        if ev[0] == 'cycle':
            target = [q + 0.005 * d for q, d in zip(ev[1], ev[2])] if ev[3] else ev[2]
            expanded += [('state', ev[1], [0.0] * 3),
                         ('command', 'policy', SUP_NAMES, target, [], []), ('tick', 0.002)]
        elif ev[0] == 'steady':
            expanded += [('steady_state',), ('steady_command', ev[2]), ('tick', 0.002)] * ev[1]
        else:
            expanded.append(ev)
    for ev in expanded:
        if ev[0] == 'steady_state':
            ev = ('state', [0.0] * 3 if sup.q is None else sup.q.tolist(), [0.0] * 3)
        elif ev[0] == 'steady_command':
            held = [0.0] * 3 if sup.q is None else sup.q.tolist()
            ev = ('command', 'policy', SUP_NAMES, [q + 0.005 * d for q, d in zip(held, ev[1])],
                  [], [])
        if ev[0] in ('state', 'raw_state'):
            names, pos, vel = (SUP_NAMES, ev[1], ev[2]) if ev[0] == 'state' else ev[1:]
            sup.on_joint_state(names, pos, vel, t, t)
            STATS['states'] = STATS.get('states', 0) + 1
            # An implausible sample is never taken as the state targets are computed from.
            if sup.q is not None:
                lim, c = sup.cfg.limits, sup.cfg
                assert np.all(np.isfinite(sup.q)) and np.all(np.isfinite(sup.dq))
                assert np.all(sup.q >= lim.position_lower - c.state_position_margin - 1e-12)
                assert np.all(sup.q <= lim.position_upper + c.state_position_margin + 1e-12)
                assert np.all(np.abs(sup.dq) <= lim.velocity_limit * c.state_velocity_factor)
        elif ev[0] == 'command':
            _, source, names, pos, vel, eff = ev
            if sup.on_command(source, list(names)[:max(len(pos), len(vel), len(eff), 1)], pos,
                              vel, eff, t, t)[0]:
                taken[source] = t
        elif ev[0] == 'request':
            {'estop': lambda: sup.estop('test', t), 'reset': lambda: sup.reset(t),
             'advance': lambda: sup.advance_stage(t),
             'sysid': lambda: sup.select_mode('sysid', t),
             'policy': lambda: sup.select_mode('policy', t)}[ev[1]]()
        else:
            t += ev[1]
            mode, scale = sup.mode, (sup.stage.scale if sup.mode == 'policy' else 1.0)
            cmd = sup.commands[mode]
            prev = sup.previous_target.copy()
            q = None if sup.q is None else sup.q.copy()
            dq = None if sup.dq is None else sup.dq.copy()
            out = sup.tick(t)
            if out is None:
                assert q is None or not sup.dogs['joint_states'].ever
                continue
            for key in ('position', 'velocity', 'effort'):
                v = getattr(out, key)
                assert v is None or np.all(np.isfinite(v)), f'non-finite {key} output'
            if out.safe:
                changed_src[:], lagging[:] = np.nan, False   # targets forgotten
                assert out.position is None or sup.cfg.safe_mode == 'hold'
                STATS['sup_safe'] += 1
                continue
            STATS['sup_forwarded'] += 1
            # Forwarded: the latest accepted command of the selected source, filtered with
            # the state and stage of this tick; the stage may only have dropped meanwhile.
            assert mode != 'policy' or sup.stage.scale <= scale or sup.cfg.auto_advance
            assert not sup.latched
            # The rate limit's time, modelled here: on the source's clock since the target last
            # moved (the command's stamp for a target that had reached its previous command,
            # the stamp's clock run on to now for one catching up), capped by the source's
            # timeout; with no previous target (measured from the measured position) that cap.
            cap = sup.cfg.timeouts[mode]
            at = np.where(lagging, t, taken[mode])
            since = np.where(np.isfinite(changed_src), at - changed_src, t - changed)
            dt = np.where(np.isfinite(prev), np.minimum(np.maximum(since, 0.0), cap), cap)
            limits = sup.limits[mode]
            from simreal_ros.core.safety import Command
            got = Command(np.array([SUP_NAMES.index(n) for n in out.names]), out.position,
                          out.velocity, out.effort)
            assert np.array_equal(got.index, cmd.index)
            bad = limit_violations(limits, scale, cmd, got, q, dq, prev, dt)
            assert not bad, bad
            if got.position is not None:
                moved = ~(prev[got.index] == got.position)
                changed[got.index[moved]] = t
                reached = got.position == cmd.position
                now_at = np.where(lagging | ~reached, t, taken[mode])
                changed_src[got.index[moved]] = now_at[moved]
                lagging[got.index] = ~reached


def test_supervisor_output_respects_the_stage_limits_for_any_event_sequence():
    before = dict(STATS)
    make_supervisor_property(max(CASES // 3, 20))()
    # The sequences reach both forwarding and the safe modes.
    assert STATS['sup_forwarded'] > before['sup_forwarded'], STATS
    assert STATS['sup_safe'] > before['sup_safe']


def test_the_unchanged_rule_judges_within_exactly():
    # Found by the bench's property run (1 case in 24,637): with kp = 1e-6 N*m/rad the checker's
    # torque allowance of 1e-9 N*m is 1e-3 rad of target, so a command 1e-4 rad past the torque
    # window counted as "within" and its (right) clip to the edge as an alteration.
    limits = Limits.from_mapping(('j0',), {
        'kp': np.array([1e-6]), 'kd': np.array([0.0]), 'position_lower': np.array([-3.0]),
        'position_upper': np.array([3.0]), 'velocity_limit': np.array([10.0]),
        'torque_limit': np.array([1e-6]), 'max_target_rate': np.array([1e6])})
    q, dq, prev = np.zeros(1), np.zeros(1), np.array([math.nan])
    past = validate_command(['j0'], [1.0 + 1e-4], [], [], limits.names)   # edge at 1.0 rad
    out, clips = filter_command(limits, 1.0, past, q, dq, prev, 0.002)
    assert out.position[0] == pytest.approx(1.0) and clips['torque'][0]
    assert not limit_violations(limits, 1.0, past, out, q, dq, prev, 0.002)
    assert unchanged_when_within(limits, 1.0, past, out, q, dq, prev, 0.002) is None
    # A command inside the window must still come out unchanged: altering it is caught.
    inside = validate_command(['j0'], [0.5], [], [], limits.names)
    moved = validate_command(['j0'], [0.4999], [], [], limits.names)
    assert 'altered' in unchanged_when_within(limits, 1.0, inside, moved, q, dq, prev, 0.002)
