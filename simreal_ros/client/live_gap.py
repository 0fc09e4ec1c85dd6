"""The live reality gap from outside: sim_bridge's `live_gap` (latched JSON), read and printed.

    from simreal_ros.client.live_gap import follow, format_live_gap
    for doc in follow(ros, seconds=10):
        print('\\n'.join(format_live_gap(doc)))
"""
import json
import queue
import time

TOPIC = 'sim_bridge/live_gap'


def follow(ros, seconds=None, first_timeout=5.0):
    """Yield each live-gap document (dict) as it arrives, for `seconds` (None: until Ctrl-C).
    Raises Missing naming sim_bridge and the topic when none comes within `first_timeout`."""
    from std_msgs.msg import String
    from simreal_ros.client.ros import Missing, dds_hint, join_name
    from simreal_ros.nodes.common import LATCHED_QOS
    topic = join_name(ros.namespace, TOPIC)
    got = queue.Queue()
    sub = ros.node.create_subscription(String, topic, lambda m: got.put(m.data), LATCHED_QOS)
    try:
        start = time.monotonic()
        seen = False
        while seconds is None or time.monotonic() - start < seconds:
            try:
                data = got.get(timeout=0.2)
            except queue.Empty:
                if not seen and time.monotonic() - start > first_timeout:
                    raise Missing(f'sim_bridge is not running (or its shadow is off): nothing '
                                  f'on {topic} within {first_timeout:g} s {dds_hint()}')
                continue
            seen = True
            try:
                yield json.loads(data)
            except ValueError:
                continue
    finally:
        ros.node.destroy_subscription(sub)


def format_live_gap(doc):
    """Printable lines: the overall status, then one line per joint (gap / noise floor)."""
    model = 'identified' if doc.get('identified') else 'nominal (not identified: no gate)'
    lines = [f'live gap {doc.get("status")} ({model} model, floor {doc.get("floor_source")}, '
             f'window {doc.get("window_s", "?")} s): {doc.get("reason", "")}']
    for joint, j in (doc.get('joints') or {}).items():
        if j.get('status') == 'unknown' or j.get('gap_over_floor') is None:
            lines.append(f'  {joint:<18} unknown')
            continue
        lines.append(f'  {joint:<18} {j["gap_over_floor"]:7.2f} x floor  {j["status"]:<5} '
                     f'(NRMSE position {100 * j["nrmse_position"]:.2f} %, velocity '
                     f'{100 * j["nrmse_velocity"]:.2f} %, motion {j.get("motion_rad_s", 0):.3f} '
                     'rad/s)')
    source = doc.get('command_source')
    if source:
        lines.append(f'  commands replayed: {source}'
                     + (f' ({doc["command_source_reason"]})'
                        if doc.get('command_source_reason') else ''))
    offline = doc.get('offline')
    if offline:
        lines.append(f'  offline gap {100 * offline["gap"]:.2f} % '
                     f'({"PASS" if offline["passed"] else "FAIL"} at '
                     f'{100 * offline["threshold"]:.0f} %, '
                     f'{"held-out" if offline.get("held_out") else "whole"} '
                     f'{offline.get("recording")})')
    return lines
