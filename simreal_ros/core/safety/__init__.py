"""Safety supervisor core (no rclpy), one rule per file.

- `config`: the safety_supervisor section read and checked (`SupervisorConfig`).
- `inputs`: measured state and commands checked before use (`Inputs`, `tilt_of`).
- `limits`: the limit filter (position, velocity, implied torque, target rate and accel).
- `watchdogs`: input ages, automatic trips, the e-stop latch and its reset (`Watchdog`, `Latch`).
- `stages`: the stage machine; `bringup`: go_default; `live_gap`: the live-gap gate.
- `supervisor`: the mode, the source clocks and the tick (`Supervisor`, `Output`).
- `check`: the limit contract checked from outside (property tests, bench).
"""
from simreal_ros.core.safety.limits import (KINDS, Command, Limits, Rejected, filter_command,
                                            implied_torque, torque_window, validate_command)
from simreal_ros.core.safety.stages import DEFAULT_STAGES, StageMachine
from simreal_ros.core.safety.config import SAFE_MODES, SOURCES, SupervisorConfig
from simreal_ros.core.safety.inputs import tilt_of
from simreal_ros.core.safety.supervisor import Output, Supervisor
from simreal_ros.core.safety.watchdogs import Watchdog

__all__ = ['KINDS', 'Command', 'Limits', 'Rejected', 'filter_command', 'implied_torque',
           'torque_window', 'validate_command', 'DEFAULT_STAGES', 'StageMachine', 'SAFE_MODES',
           'SOURCES', 'Output', 'Supervisor', 'SupervisorConfig', 'Watchdog', 'tilt_of']
