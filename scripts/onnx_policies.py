#!/usr/bin/env python3
"""simreal_ros.core.onnx_policies from the source checkout (tests and benches load it by path).

    .venv/bin/python scripts/onnx_policies.py arm3 /tmp/arm3_policy.onnx
    .venv/bin/python scripts/onnx_policies.py mlp /tmp/mlp48.onnx --sizes 48 512 256 128 12
"""
from simreal_ros.core.onnx_policies import (STAND_INS, arm3, main, mlp, recurrent,  # noqa: F401
                                       stand_in_policy, user_data_dir)

if __name__ == '__main__':
    main()
