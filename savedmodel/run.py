"""python -m savedmodel.run: detections of an exported model with only its runtime, NumPy and OpenCV.

    python -m savedmodel.run --model model.onnx|model.xml|model.tflite --input IMAGE|FOLDER|GLOB [--output DIR]

The runtime is chosen by the model file (`.onnx`: ONNX Runtime, `.xml`: OpenVINO, `.tflite`: LiteRT; see
`savedmodel.runtimes`),
in the precision the model was exported for. Images are read as `tfdet.infer` reads them (OpenCV, EXIF
orientation applied), prepared and finished as the Predictor does, and the same files are written: a picture per image with a detection scoring >= --thresh, `detections.json`
(COCO results with the model's dataset category ids) and `images.json` (images and named categories).
TensorFlow is never imported.
"""

import argparse
import sys

from savedmodel.runtimes import ExportedModel, ModelFileError
from tfdet.imaging.image_io import PICTURE_FORMATS, list_inputs
from tfdet.outputs.detection_writer import DetectionRun


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m savedmodel.run", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="exported model: .onnx, .xml or .tflite (python -m savedmodel.export --format onnx|openvino|litert)")
    parser.add_argument("--input", required=True, help="image, folder or glob pattern")
    parser.add_argument("--output", default="run_output", help="output folder (run_output)")
    parser.add_argument("--output-ext", default="png", choices=PICTURE_FORMATS, help="picture format (png)")
    parser.add_argument("--always-out", action="store_true", help="a picture even without a detection >= --thresh")
    parser.add_argument("--thresh", type=float, default=0.7, help="score threshold for drawing (0.7)")
    parser.add_argument("--kp-thresh", type=float, default=2.0, help="keypoint heatmap logit threshold (2)")
    parser.add_argument("--json-per-input", action="store_true", help="also write <name>.json per input")
    parser.add_argument("--no-vis", action="store_true", help="write no pictures")
    return parser


class _Settings:
    """The two config values a run reads, as the model was exported with."""

    def __init__(self, model):
        self.MODEL = argparse.Namespace(NUM_CLASSES=model.num_classes)
        self.KRCNN = argparse.Namespace(KEYPOINT_CONFIDENCE=model.keypoint_confidence)


def main(argv=None):
    args = build_parser().parse_args(argv)
    args.videopose3d = False
    try:
        model = ExportedModel(args.model)
        inputs = list_inputs(args.input)
    except (ModelFileError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    precision = model.precision
    if precision != model.metadata["precision"]:
        precision += f", as this CPU has no {model.metadata['precision']} arithmetic"
    print(f"{model.path.name} on {model.runtime} ({precision}): {model.categories.describe()}")
    log = DetectionRun(args, model.predict, model.categories, _Settings(model)).run(inputs)
    print(log.summary(args.thresh))
    return 1 if log.failures else 0


if __name__ == "__main__":
    sys.exit(main())
