#!/usr/bin/env python3
"""simreal_ros.core.pantilt_policy from the source checkout: the pantilt robot's stand-in policy.

    .venv/bin/python scripts/pantilt_policy.py /tmp/pantilt_policy.onnx
"""
from simreal_ros.core.pantilt_policy import main, pantilt  # noqa: F401

if __name__ == '__main__':
    main()
