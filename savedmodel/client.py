"""Clients of TF Serving's REST and gRPC Predict APIs for a model exported by savedmodel.export.

`connect(url)` gives a client whose `predict(image)` returns what
`tfdet.inference.Predictor.predict` returns (boxes, scores, classes, masks, keypoints as numpy,
cropped to each image's detections), plus `class_names` (a str per detection) from models that serve
`detection_class_names`. REST uses only the standard library; gRPC needs the optional
`tensorflow-serving-api` package, imported when a gRPC client is made.

    python -m savedmodel.client --url http://localhost:8501/v1/models/mask_rcnn --image photo.jpg
    python -m savedmodel.client --url grpc://localhost:8500 --model mask_rcnn --image photo.jpg
"""

if __name__ == "__main__":  # before TensorFlow is imported: its native log records stay off the terminal
    from tfdet.console import quiet_native_logs

    quiet_native_logs()

import argparse
import base64
import json
import pathlib
import re
import sys
import urllib.error
import urllib.parse
import urllib.request

import numpy as np

from savedmodel import outputs as names
from tfdet.console import add_verbose_flag

# dtypes of the signature outputs, which REST's JSON does not carry; masks depend on the format.
_OUTPUT_DTYPES = {
    names.NUM_DETECTIONS: np.int32,
    names.BOXES: np.float32,
    names.SCORES: np.float32,
    names.CLASSES: np.int32,
    names.CLASS_NAMES: str,
    names.KEYPOINTS: np.float32,
    names.KEYPOINT_PROBS: np.float32,
    names.IMAGE_SIZES: np.int32,
}
_MASK_DTYPES = {"image": np.uint8, "roi": np.float32}


class ServingError(Exception):
    """The server refused or failed a request; the message carries its answer."""


def encode_image(image):
    """Bytes for the `serving_default` signature: encoded file bytes as they are, or an
    H x W x 3 uint8 BGR array (as cv2.imread gives) encoded losslessly as PNG."""
    if isinstance(image, (bytes, bytearray)):
        return bytes(image)
    array = np.asarray(image)
    if array.dtype != np.uint8 or array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] != 3):
        raise ValueError(
            f"Expected encoded image bytes or an H x W x 3 uint8 BGR array, got {array.dtype} {array.shape}"
        )
    import cv2

    ok, png = cv2.imencode(".png", array)
    if not ok:
        raise ValueError(f"cv2 could not encode an image of shape {array.shape} as PNG")
    return png.tobytes()


class _Client:
    """Common part: images in, Predictor-style dicts out; subclasses send the batched request."""

    def __init__(
        self, model, version=None, signature="serving_default", mask_format="image", mask_threshold=0.5, timeout=60.0
    ):
        if mask_format not in names.MASK_FORMATS:
            raise ValueError(f"mask_format must be one of {names.MASK_FORMATS}, got {mask_format!r}")
        self.model = model
        self.version = None if version is None else int(version)
        self.signature = signature
        self.mask_format = mask_format
        self.mask_threshold = float(mask_threshold)
        self.timeout = float(timeout)

    def predict(self, image):
        """Detections of one image (bytes or BGR array), or a list of results for a list of images."""
        batch = isinstance(image, (list, tuple))
        encoded = [encode_image(im) for im in (image if batch else [image])]
        results = names.detections_per_image(self.predict_outputs(encoded), self.mask_format, self.mask_threshold)
        return results if batch else results[0]

    def predict_outputs(self, encoded_images):
        """The signature's batched outputs {name: numpy array} for a list of encoded images."""
        raise NotImplementedError


class RestClient(_Client):
    """`POST {url}/v1/models/NAME[/versions/N]:predict` with row-format `instances` of {"b64": ...}."""

    def __init__(self, url, model, **kwargs):
        super().__init__(model, **kwargs)
        self.predict_url = rest_predict_url(url, model, self.version)

    def predict_outputs(self, encoded_images):
        request = urllib.request.Request(
            self.predict_url,
            data=rest_request_body(encoded_images, self.signature),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as error:
            raise ServingError(f"{self.predict_url} answered HTTP {error.code}: {_rest_error(error)}") from None
        except urllib.error.URLError as error:
            raise ServingError(f"cannot reach {self.predict_url}: {error.reason}") from None
        return rest_outputs(answer, self.mask_format)


def rest_predict_url(url, model, version=None):
    """TF Serving's REST predict URL of `model` (and `version`) on the server at `url`."""
    path = f"/v1/models/{urllib.parse.quote(model, safe='')}"
    if version is not None:
        path += f"/versions/{int(version)}"
    return url.rstrip("/") + path + ":predict"


def rest_request_body(encoded_images, signature="serving_default"):
    """The JSON body of a row-format predict request: one {"b64": ...} instance per image."""
    instances = [{"b64": base64.b64encode(data).decode("ascii")} for data in encoded_images]
    return json.dumps({"signature_name": signature, "instances": instances}).encode("utf-8")


def rest_outputs(answer, mask_format="image"):
    """A row-format answer {"predictions": [{output: value, ...} per image]} -> batched numpy arrays."""
    if "error" in answer:
        raise ServingError(str(answer["error"]))
    predictions = answer.get("predictions")
    if not isinstance(predictions, list) or not predictions or not isinstance(predictions[0], dict):
        raise ServingError(f"not a row-format answer with named outputs: keys {sorted(answer)}")
    dtypes = dict(_OUTPUT_DTYPES, **{names.MASKS: _MASK_DTYPES[mask_format]})
    return {name: np.asarray([row[name] for row in predictions], dtype=dtypes.get(name)) for name in predictions[0]}


def _rest_error(error):
    """The {"error": ...} message of a REST error answer, or its raw text."""
    text = error.read().decode("utf-8", "replace")
    try:
        return json.loads(text)["error"]
    except (ValueError, KeyError, TypeError):
        return text.strip() or error.reason


class GrpcClient(_Client):
    """`PredictionService.Predict` on `target` (host:port); needs `tensorflow-serving-api`."""

    def __init__(self, target, model, **kwargs):
        super().__init__(model, **kwargs)
        grpc, _, prediction_service_pb2_grpc = _grpc_modules()
        # Image-size masks easily pass gRPC's default 4 MB limit on received messages.
        self._channel = grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", -1)])
        self._stub = prediction_service_pb2_grpc.PredictionServiceStub(self._channel)
        self._grpc = grpc
        self.target = target

    def predict_outputs(self, encoded_images):
        request = grpc_request(encoded_images, self.model, self.version, self.signature)
        try:
            response = self._stub.Predict(request, timeout=self.timeout)
        except self._grpc.RpcError as error:
            raise ServingError(f"{self.target} answered {error.code().name}: {error.details()}") from None
        return grpc_outputs(response)

    def close(self):
        self._channel.close()


def grpc_request(encoded_images, model, version=None, signature="serving_default"):
    """A PredictRequest with the encoded images as the string tensor `image_bytes` [batch]."""
    import tensorflow as tf

    _, predict_pb2, _ = _grpc_modules()
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    request.model_spec.signature_name = signature
    if version is not None:
        request.model_spec.version.value = int(version)
    request.inputs[names.ENCODED_INPUT].CopyFrom(
        tf.make_tensor_proto(list(encoded_images), dtype=tf.string, shape=[len(encoded_images)])
    )
    return request


def grpc_outputs(response):
    """A PredictResponse -> {output name: numpy array}."""
    import tensorflow as tf

    return {name: tf.make_ndarray(proto) for name, proto in response.outputs.items()}


def _grpc_modules():
    try:
        import grpc
        from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
    except ImportError as error:
        raise ImportError(
            f"the gRPC client needs the tensorflow-serving-api package (pip install tensorflow-serving-api): {error}"
        ) from None
    return grpc, predict_pb2, prediction_service_pb2_grpc


def connect(url, model=None, version=None, **kwargs):
    """A RestClient or GrpcClient for `url`, which may name the model (and version) itself:

    http(s)://host:8501[/v1/models/NAME[/versions/N]] (REST), grpc://host:8500[/NAME[/versions/N]] (gRPC).
    `model` and `version` given here take precedence over the URL's.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https", "grpc"):
        raise ValueError(f"--url must start with http://, https:// (REST) or grpc:// (gRPC), got {url!r}")
    prefix = "/v1/models/" if parts.scheme != "grpc" else "/"
    match = re.fullmatch(re.escape(prefix) + r"([^/:]+)(?:/versions/(\d+))?/?", parts.path)
    if parts.path.strip("/") and not match:
        raise ValueError(f"cannot read a model from the URL path {parts.path!r} (expected {prefix}NAME[/versions/N])")
    if match:
        model = model or urllib.parse.unquote(match.group(1))
        version = version if version is not None else match.group(2)
    if not model:
        raise ValueError("no model name: pass --model NAME or put it in the URL")
    kwargs["version"] = version
    if parts.scheme == "grpc":
        return GrpcClient(parts.netloc, model, **kwargs)
    return RestClient(f"{parts.scheme}://{parts.netloc}", model, **kwargs)


def _summary(path, result):
    lines = [f"{path}: {len(result['scores'])} detections"]
    class_names = result.get("class_names", [None] * len(result["scores"]))
    for i, (box, score, cls, name) in enumerate(zip(result["boxes"], result["scores"], result["classes"], class_names)):
        label = f"class {cls}" if name is None else f"{name} (class {cls})"
        line = f"  {label} score {score:.3f} box {np.round(box, 1).tolist()}"
        if "masks" in result:
            line += f" mask {int(result['masks'][i].sum())} px"
        if "keypoints" in result:
            line += f" keypoints {result['keypoints'].shape[1]}"
        lines.append(line)
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m savedmodel.client", description="Detect with a served tfdet model."
    )
    add_verbose_flag(parser)
    parser.add_argument(
        "--url",
        required=True,
        help="REST: http://host:8501[/v1/models/NAME[/versions/N]]; gRPC: grpc://host:8500[/NAME[/versions/N]]",
    )
    parser.add_argument("--model", help="model name in the server's config (unless the URL names it)")
    parser.add_argument("--version", type=int, help="model version (default: the server's choice)")
    parser.add_argument("--signature", default="serving_default", help="signature taking encoded images")
    parser.add_argument("--mask-format", choices=names.MASK_FORMATS, default="image", help="as exported")
    parser.add_argument("--mask-threshold", type=float, default=0.5, help="roi masks: MRCNN.THRESH_BINARIZE")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds")
    parser.add_argument("--image", required=True, action="append", help="image file (repeat for a batch)")
    args = parser.parse_args(argv)
    try:
        encoded = [pathlib.Path(path).read_bytes() for path in args.image]
        client = connect(
            args.url, args.model, version=args.version, signature=args.signature, mask_format=args.mask_format,
            mask_threshold=args.mask_threshold, timeout=args.timeout,
        )  # fmt: skip
        results = client.predict(encoded)
    except (OSError, ValueError, ImportError, ServingError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for path, result in zip(args.image, results):
        print(_summary(path, result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
