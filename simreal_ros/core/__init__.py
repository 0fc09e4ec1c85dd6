"""ROS-free core: maths, models and validation. Nothing here imports rclpy."""
