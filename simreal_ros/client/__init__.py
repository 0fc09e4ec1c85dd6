"""The client layer: everything that talks to a running graph from the outside.

- `cli`: the operator's verbs (`simreal`); `demo`: the end-to-end demo (`make demo`).
- `ros`: the connection (`Ros`, `Missing`, service and topic helpers, `safety_state`).
- `processes`: start and stop the graph's node processes (`start_graph`, `stop_graph`).
- `sysid`: the SysID nodes' and sim_bridge's client side (runs, results, the gap).
- `live_gap`, `monitor`, `record`: follow the live gap, publish rviz markers, record to MCAP.
- `rig`: node processes and observers for the integration tests and the benches.

Imports core/, nodes/ (QoS), drivers/ and deploy/; nothing below imports it.
"""
