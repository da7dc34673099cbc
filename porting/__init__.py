"""Legacy weight porting: safe readers of Detectron `.pkl` / maskrcnn-benchmark `.pth` files.

Importing the package is cheap: its names load their module (and TensorFlow, for the loaders) on first
use, so `python -m porting` can quiet TensorFlow's native logs before TensorFlow is imported.
"""

import importlib

_MODULE_OF = {
    "PortReport": "porting.detectron_loader",
    "load_detectron_weights": "porting.detectron_loader",
    "port_blobs": "porting.detectron_loader",
    "BenchmarkPortReport": "porting.maskrcnn_benchmark_loader",
    "load_maskrcnn_benchmark_weights": "porting.maskrcnn_benchmark_loader",
    "read_pth": "porting.pth_reader",
    "bbox_reg_weights_from_cfg": "porting.embedded_cfg",
    "parse_embedded_cfg": "porting.embedded_cfg",
    "UnsafeWeightFileError": "porting.pickle_reader",
    "WeightFile": "porting.pickle_reader",
    "WeightFileError": "porting.pickle_reader",
    "load_blobs": "porting.pickle_reader",
    "read_weight_file": "porting.pickle_reader",
}

__all__ = sorted(_MODULE_OF)


def __getattr__(name):
    if name not in _MODULE_OF:
        raise AttributeError(f"module 'porting' has no attribute {name!r}")
    return getattr(importlib.import_module(_MODULE_OF[name]), name)
