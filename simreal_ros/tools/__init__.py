"""Offline tools: they need no running graph (files in, files out).

- `params_doc`: docs/configuration.md from every node and observation term.
- `reference_rollout`: a reference trace from a robot's MuJoCo model and ONNX policy, no ROS.
"""
