"""Helpers for integration tests: now simreal_ros/client/rig.py, shared with the benches.

Kept as a re-export so `from rosproc import NodeProcess, Spinner, wait_for` keeps working.
"""
import os

from simreal_ros.client.rig import NodeProcess, Spinner, wait_for  # noqa: F401 - re-exported

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
