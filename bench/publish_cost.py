#!/usr/bin/env python3
"""The CPU cost of one publish and one read of the 500 Hz messages: message objects vs bytes.

    .venv/bin/python bench/publish_cost.py [--count 5000] [--joints 12]

Times, in this process, what safety_supervisor and sim_robot do per message: building a
JointState (or Imu) and `publish(msg)` (rclpy converts it field by field), against
`publish(bytes)` of core/cdr.py's encoding (rclpy's publish_raw). No subscriber is matched,
so what is timed is the Python and conversion work, not the transport (whose cost per
matched reader bench/cpu_budget.py's whole-graph figures include).

The read side times what a subscriber does with each message it takes: rclpy's message object
(`deserialize_message`, what a callback or `take_message(raw=False)` makes, and the fields
read) against the same bytes read by core/cdr.py's JointStateDecoder and
decode_imu_orientation (safety_supervisor's joint_states and imu; sim_robot and
unitree_bridge read hardware/command, policy_runner joint_states, the same way). It also times
the `inspect.signature` call rclpy's executors make at every timer firing, on a bound method
and on nodes/common.hot_timer_callback's wrapper. The last line printed is a JSON summary
(microseconds per message or call, the median of 5 rounds).
"""
import argparse
import json
import os
from pathlib import Path
import statistics
import sys
import time

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from simreal_ros.nodes.common import localhost_discovery  # noqa: E402
localhost_discovery(keep_choice=True)   # and ROS_LOCALHOST_ONLY=1 on Humble


def per_call(fn, count):
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for i in range(count):
            fn(i)
        rounds.append((time.perf_counter() - t0) / count * 1e6)
    return round(statistics.median(rounds), 2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--count', type=int, default=5000)
    parser.add_argument('--joints', type=int, default=12)
    args = parser.parse_args()
    import numpy as np
    import rclpy
    from sensor_msgs.msg import Imu, JointState

    from simreal_ros.core.cdr import ImuEncoder, JointStateEncoder
    from simreal_ros.nodes.common import prefer_udp_transport
    prefer_udp_transport()
    rclpy.init()
    node = rclpy.create_node(f'publish_cost_{os.getpid()}')
    topic = f'publish_cost_{os.getpid()}'
    pub = node.create_publisher(JointState, topic + '/js', 1)
    pub_imu = node.create_publisher(Imu, topic + '/imu', 1)
    names = [f'joint_{i}_name' for i in range(args.joints)]
    q = np.random.default_rng(0).uniform(-1, 1, args.joints)
    enc, imu_enc = JointStateEncoder(names), ImuEncoder('pelvis')
    quat, gyro, acc = (1.0, 0.0, 0.0, 0.0), (0.1, 0.2, 0.3), (0.0, 0.0, 9.81)

    def message(i):
        msg = JointState(name=names)
        msg.header.stamp.sec, msg.header.stamp.nanosec = i, 0
        msg.position, msg.velocity, msg.effort = q.tolist(), q.tolist(), q.tolist()
        pub.publish(msg)

    def raw(i):
        pub.publish(enc.encode(i, 0, q, q, q))

    def imu_message(i):
        msg = Imu()
        msg.header.frame_id = 'pelvis'
        msg.header.stamp.sec = i
        msg.orientation.w, msg.orientation.x, msg.orientation.y, msg.orientation.z = quat
        msg.angular_velocity.x, msg.angular_velocity.y, msg.angular_velocity.z = gyro
        (msg.linear_acceleration.x, msg.linear_acceleration.y,
         msg.linear_acceleration.z) = acc
        pub_imu.publish(msg)

    def imu_raw(i):
        pub_imu.publish(imu_enc.encode(i, 0, quat, gyro, acc))

    from rclpy.serialization import deserialize_message, serialize_message
    from simreal_ros.core.cdr import JointStateDecoder, decode_imu_orientation
    sample = JointState(name=names)
    sample.position, sample.velocity, sample.effort = q.tolist(), q.tolist(), q.tolist()
    js_bytes = serialize_message(sample)
    imu_sample = Imu()
    imu_sample.header.frame_id = 'pelvis'
    imu_sample.orientation.w = 1.0
    imu_bytes = serialize_message(imu_sample)
    decoder = JointStateDecoder()

    def read_message(i):
        msg = deserialize_message(js_bytes, JointState)
        return (msg.header.stamp.sec, msg.header.stamp.nanosec, msg.name, msg.position,
                msg.velocity)

    def read_bytes(i):
        return decoder.decode(js_bytes)

    def read_imu_message(i):
        msg = deserialize_message(imu_bytes, Imu)
        o = msg.orientation
        return msg.header.stamp.sec, msg.header.stamp.nanosec, (o.w, o.x, o.y, o.z)

    def read_imu_bytes(i):
        return decode_imu_orientation(imu_bytes)

    summary = {'joints': args.joints, 'count': args.count,
               'joint_state_message_us': per_call(message, args.count),
               'joint_state_bytes_us': per_call(raw, args.count),
               'imu_message_us': per_call(imu_message, args.count),
               'imu_bytes_us': per_call(imu_raw, args.count)}
    summary['saved_at_500hz_percent_of_a_core'] = round(
        500 * ((summary['joint_state_message_us'] - summary['joint_state_bytes_us'])
               + (summary['imu_message_us'] - summary['imu_bytes_us'])) * 1e-4, 2)
    summary.update(joint_state_read_message_us=per_call(read_message, args.count),
                   joint_state_read_bytes_us=per_call(read_bytes, args.count),
                   imu_read_message_us=per_call(read_imu_message, args.count),
                   imu_read_bytes_us=per_call(read_imu_bytes, args.count))
    import inspect
    from simreal_ros.nodes.common import hot_timer_callback

    class Owner:
        def tick(self):
            pass
    owner = Owner()
    hot = hot_timer_callback(owner.tick)
    summary.update(
        timer_signature_bound_method_us=per_call(lambda i: inspect.signature(owner.tick),
                                                 args.count),
        timer_signature_hot_callback_us=per_call(lambda i: inspect.signature(hot), args.count))
    summary['read_saved_at_500hz_percent_of_a_core'] = round(
        500 * ((summary['joint_state_read_message_us'] - summary['joint_state_read_bytes_us'])
               + (summary['imu_read_message_us'] - summary['imu_read_bytes_us'])) * 1e-4, 2)
    node.destroy_node()
    rclpy.try_shutdown()
    print(json.dumps(summary))


if __name__ == '__main__':
    main()
