"""The deployment, described once (no rclpy): which nodes start with which files.

- `graph`: nodes, parameter files and remaps for `ros2 launch`, `simreal up` and the demo.
- `monitor_files`: the rviz, rqt and diagnostic_aggregator files for a robot's namespace.
"""
