"""simreal_ros: take a learned policy from simulation to a real robot, safely."""

__version__ = '0.1.0'
