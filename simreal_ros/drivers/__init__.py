"""Robot-side wires: the vendor's message types and DDS participants (no rclpy).

- `unitree_dds`: Unitree `LowCmd_`/`LowState_` over CycloneDDS (`unitree_bridge`, and
  `sim_robot`'s `interface: unitree_hg` emulation of the robot).
"""
