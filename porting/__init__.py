"""Legacy weight porting: safe readers of Detectron `.pkl` / maskrcnn-benchmark `.pth` files."""

from porting.detectron_loader import PortReport, load_detectron_weights, port_blobs
from porting.maskrcnn_benchmark_loader import BenchmarkPortReport, load_maskrcnn_benchmark_weights
from porting.pth_reader import read_pth
from porting.embedded_cfg import bbox_reg_weights_from_cfg, parse_embedded_cfg
from porting.pickle_reader import (
    UnsafeWeightFileError,
    WeightFile,
    WeightFileError,
    load_blobs,
    read_weight_file,
)

__all__ = [
    "BenchmarkPortReport",
    "load_maskrcnn_benchmark_weights",
    "read_pth",
    "PortReport",
    "load_detectron_weights",
    "port_blobs",
    "UnsafeWeightFileError",
    "WeightFile",
    "WeightFileError",
    "bbox_reg_weights_from_cfg",
    "load_blobs",
    "parse_embedded_cfg",
    "read_weight_file",
]
