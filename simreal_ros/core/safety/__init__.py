"""Safety supervisor core (no rclpy): limit filter, stage machine, watchdogs, e-stop latch."""
from simreal_ros.core.safety.limits import (KINDS, Command, Limits, Rejected, filter_command,
                                            implied_torque, torque_window, validate_command)
from simreal_ros.core.safety.stages import DEFAULT_STAGES, StageMachine
from simreal_ros.core.safety.supervisor import (SAFE_MODES, SOURCES, Output, Supervisor,
                                                SupervisorConfig, Watchdog, tilt_of)

__all__ = ['KINDS', 'Command', 'Limits', 'Rejected', 'filter_command', 'implied_torque',
           'torque_window', 'validate_command', 'DEFAULT_STAGES', 'StageMachine', 'SAFE_MODES',
           'SOURCES', 'Output', 'Supervisor', 'SupervisorConfig', 'Watchdog', 'tilt_of']
