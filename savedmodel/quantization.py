"""int8 post-training quantization of an ONNX export with ONNX Runtime's static quantizer.

The convolutions and matrix products take int8 weights (one scale per output channel) and int8 activations
(QDQ format: QuantizeLinear / DequantizeLinear pairs around them, which ONNX Runtime fuses into int8 kernels);
activation ranges are the min / max seen on the calibration images, prepared as the runner prepares them.
Everything else (box decoding, NMS, RoIAlign's gathers, the outputs) stays float32.
"""

import logging

import numpy as np
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

from tfdet.imaging.image_io import read_image
from tfdet.imaging.preprocessing import prepared_inputs

QUANTIZED_OPS = ("Conv", "MatMul", "Gemm")


def quantize_onnx(source, target, image_paths, metadata):
    """Write the int8 model of ONNX file `source` to `target`, calibrated on `image_paths` (read with
    `tfdet.imaging.image_io.read_image`, prepared with the export's `metadata` values)."""
    # The quantizer logs advice on Python's root logger (pre-processing the model first): kept off the terminal.
    logging.disable(logging.WARNING)
    try:
        quantize_static(
            str(source),
            str(target),
            _CalibrationImages(image_paths, metadata),
            quant_format=QuantFormat.QDQ,
            op_types_to_quantize=list(QUANTIZED_OPS),
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            extra_options={"EnableSubgraph": True},
        )
    finally:
        logging.disable(logging.NOTSET)


class _CalibrationImages(CalibrationDataReader):
    """The model's inputs, one calibration image at a time."""

    def __init__(self, image_paths, metadata):
        self._paths = iter(image_paths)
        self._metadata = metadata

    def get_next(self):
        path = next(self._paths, None)
        if path is None:
            return None
        meta = self._metadata
        inputs = prepared_inputs(
            [read_image(path)], meta["pixel_means"], meta["test_scale"], meta["test_max_size"], meta["stride"]
        )
        return {name: np.asarray(value) for name, value in inputs.items()}
