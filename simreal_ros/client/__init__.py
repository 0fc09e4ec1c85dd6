"""The client layer: everything that talks to a running graph from the outside.

- `ros`: the connection (`Ros`, `Missing`, service and topic helpers, `safety_state`).
- `processes`: start and stop the graph's node processes (`start_graph`, `stop_graph`).
- `sysid`: the SysID nodes' and sim_bridge's client side (runs, results, the gap).
- `rig`: node processes and observers for the integration tests and the benches.

Used by the `simreal` verbs (simreal_ros/cli.py), the demo, the monitor, the tests and the
benches; it imports nothing of them.
"""
