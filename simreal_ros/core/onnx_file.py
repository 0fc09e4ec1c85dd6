"""Write an ONNX graph made with onnx.helper as a file onnxruntime reads (checked first)."""
import os

import onnx
from onnx import helper

IR_VERSION = 9   # onnxruntime reads ir_version <= 10
OPSET = 17


def save_graph(graph, path, metadata=None):
    """Check `graph`, write it to `path` with `metadata` as metadata_props; return `path`."""
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', OPSET)],
                              producer_name='simreal_ros scripts/onnx_policies.py')
    model.ir_version = IR_VERSION
    for key, value in (metadata or {}).items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, str(value)
    onnx.checker.check_model(model)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    onnx.save(model, path)
    return path
