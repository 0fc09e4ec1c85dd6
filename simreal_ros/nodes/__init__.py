"""Thin rclpy adapters around simreal_ros.core: parameters, topics, services, timers."""
