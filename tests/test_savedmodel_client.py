"""The TF Serving clients: request bodies in TF Serving's documented formats, and round trips
through local REST and gRPC servers that serve the exported SavedModel (`tf.saved_model.load`) as
TF Serving's APIs specify. The model is the tiny shapes model with seeded weights
(`savedmodel_fixtures.TinyModel`, shared with test_savedmodel.py within a test process), exported
from its .weights.h5 (test_savedmodel.py exports it from a Detectron .pkl) with
`--mask-format roi`, so the client pastes the masks; results must equal the Predictor's."""

import base64
import json
import pathlib
import re
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import cv2
import numpy as np
import pytest
import tensorflow as tf

from savedmodel import client as serving_client
from savedmodel.client import (
    GrpcClient,
    RestClient,
    ServingError,
    grpc_outputs,
    grpc_request,
    rest_predict_url,
    rest_request_body,
)
from savedmodel.export import main as export_main
from savedmodel.outputs import detections_per_image
from support.savedmodel_fixtures import (
    SHAPES_CATEGORIES,
    TINY_TEST,
    TinyModel,
    assert_same_detections,
    shapes_val_images,
)
from tfdet.graph_options import cpu_graph_options
from tfdet.inference import Predictor

MODEL_NAME = "shapes_tiny"
SERVING_API = "tensorflow_serving.apis"
NEEDS_SERVING_API = "needs tensorflow-serving-api (the test and grpc extras)"


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """Two shapes val JPEGs of different sizes (the second cropped), as a client sends them."""
    paths = shapes_val_images(tmp_path_factory.mktemp("shapes"), 2)
    first = pathlib.Path(paths["shapes0"]).read_bytes()
    cropped = cv2.imread(paths["shapes1"])[10:170, 4:180]
    return [first, cv2.imencode(".jpg", cropped, [cv2.IMWRITE_JPEG_QUALITY, 95])[1].tobytes()]


def decoded(encoded):
    """The BGR pixels of encoded image bytes, as cv2.imread gives them (and the served graph decodes them)."""
    return cv2.imdecode(np.frombuffer(encoded, np.uint8), cv2.IMREAD_COLOR)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """(Predictor, loaded SavedModel) of the tiny model exported with RoI masks."""
    tiny = TinyModel(tmp_path_factory)
    config, weights = tiny.config, tiny.weights
    out = tmp_path_factory.mktemp("serving") / MODEL_NAME / "1"
    args = ["--cfg", str(config), "--weights", str(weights), "--out", str(out), "--mask-format", "roi"]
    assert export_main(args + list(TINY_TEST)) == 0
    return Predictor(tiny.test_config(), weights), tf.saved_model.load(str(out))


def run_signature(signature, **inputs):
    """A loaded signature's outputs, run as the Predictor runs (without Grappler on CPUs, which
    saves ~2 s of its first call): these local servers stand in for TF Serving, whose graph
    optimisation test_savedmodel.py covers."""
    with cpu_graph_options():
        return signature(**inputs)


class _RestHandler(BaseHTTPRequestHandler):
    """TF Serving's REST predict API (row format) on the loaded model's signatures."""

    loaded = None

    def do_POST(self):
        match = re.fullmatch(r"/v1/models/([^/:]+)(?:/versions/(\d+))?:predict", self.path)
        if not match or match.group(1) != MODEL_NAME or match.group(2) not in (None, "1"):
            return self._answer(404, {"error": f"Servable not found for request: {self.path}"})
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        signature = self.loaded.signatures[body.get("signature_name", "serving_default")]
        (name,) = signature.structured_input_signature[1]
        values = [base64.b64decode(item["b64"]) if isinstance(item, dict) else item for item in body["instances"]]
        try:
            outputs = {k: v.numpy() for k, v in run_signature(signature, **{name: tf.constant(values)}).items()}
        except tf.errors.InvalidArgumentError as error:
            return self._answer(400, {"error": error.message})
        rows = [{k: v[i].tolist() for k, v in outputs.items()} for i in range(len(values))]
        self._answer(200, {"predictions": rows})

    def _answer(self, status, content):
        # TF Serving writes DT_STRING outputs (not named *_bytes) as JSON strings
        data = json.dumps(content, default=lambda value: value.decode("utf-8")).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def rest_url(model):
    handler = type("Handler", (_RestHandler,), {"loaded": model[1]})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def grpc_target(model):
    """A gRPC PredictionService whose Predict runs the loaded model's signatures."""
    grpc = pytest.importorskip("grpc", reason=NEEDS_SERVING_API)
    apis = pytest.importorskip(f"{SERVING_API}.prediction_service_pb2_grpc", reason=NEEDS_SERVING_API)
    from tensorflow_serving.apis import predict_pb2

    class Servicer(apis.PredictionServiceServicer):
        def Predict(self, request, context):
            signature = model[1].signatures[request.model_spec.signature_name or "serving_default"]
            inputs = {name: tf.make_ndarray(proto) for name, proto in request.inputs.items()}
            try:
                outputs = run_signature(signature, **{k: tf.constant(v) for k, v in inputs.items()})
            except tf.errors.InvalidArgumentError as error:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, error.message)
            response = predict_pb2.PredictResponse()
            response.model_spec.CopyFrom(request.model_spec)
            for name, value in outputs.items():
                response.outputs[name].CopyFrom(tf.make_tensor_proto(value.numpy()))
            return response

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), options=[("grpc.max_send_message_length", -1)])
    apis.add_PredictionServiceServicer_to_server(Servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(None)


def rest_body_as_predict_request(body, predict_pb2):
    """TF Serving's documented reading of a REST row-format body for a one-input signature: the
    `instances` list is the batch of that input; {"b64": ...} is a base64 DT_STRING element."""
    values = [base64.b64decode(item["b64"], validate=True) for item in body["instances"]]
    request = predict_pb2.PredictRequest()
    request.model_spec.signature_name = body.get("signature_name", "serving_default")
    request.inputs["image_bytes"].CopyFrom(tf.make_tensor_proto(values, dtype=tf.string))
    return request


def test_rest_request_is_tf_serving_row_format(photos):
    assert (
        rest_predict_url("http://host:8501/", "mask rcnn", 3)
        == "http://host:8501/v1/models/mask%20rcnn/versions/3:predict"
    )
    assert rest_predict_url("http://host:8501", "m") == "http://host:8501/v1/models/m:predict"
    body = json.loads(rest_request_body(photos, "serving_default"))
    assert sorted(body) == ["instances", "signature_name"] and body["signature_name"] == "serving_default"
    assert all(list(item) == ["b64"] for item in body["instances"])
    assert [base64.b64decode(item["b64"], validate=True) for item in body["instances"]] == photos


def test_rest_and_grpc_bodies_carry_the_same_predict_request(photos):
    predict_pb2 = pytest.importorskip(f"{SERVING_API}.predict_pb2", reason=NEEDS_SERVING_API)
    from tensorflow.core.framework import types_pb2

    grpc_body = grpc_request(photos, "shapes_tiny", 2, "serving_default").SerializeToString()
    request = predict_pb2.PredictRequest.FromString(grpc_body)
    assert request.model_spec.name == "shapes_tiny" and request.model_spec.version.value == 2
    assert request.model_spec.signature_name == "serving_default"
    assert list(request.inputs) == ["image_bytes"]
    tensor = request.inputs["image_bytes"]
    assert tensor.dtype == types_pb2.DT_STRING and [d.size for d in tensor.tensor_shape.dim] == [2]
    assert list(tensor.string_val) == photos
    assert not grpc_request(photos[:1], "m").model_spec.HasField("version")
    from_rest = rest_body_as_predict_request(json.loads(rest_request_body(photos)), predict_pb2)
    assert from_rest.inputs["image_bytes"] == tensor
    assert from_rest.model_spec.signature_name == request.model_spec.signature_name


def test_connect_reads_the_model_from_the_url():
    client = serving_client.connect("http://host:8501/v1/models/mask_rcnn/versions/3", signature="image_tensor")
    assert isinstance(client, RestClient) and client.signature == "image_tensor"
    assert client.predict_url == "http://host:8501/v1/models/mask_rcnn/versions/3:predict"
    assert (
        serving_client.connect("https://host/v1/models/a", "b", 2).predict_url
        == "https://host/v1/models/b/versions/2:predict"
    )
    with pytest.raises(ValueError, match="no model name"):
        serving_client.connect("http://host:8501")
    with pytest.raises(ValueError, match="expected /v1/models/NAME"):
        serving_client.connect("http://host:8501/v1/models/m:predict")
    pytest.importorskip(f"{SERVING_API}.predict_pb2", reason=NEEDS_SERVING_API)
    client = serving_client.connect("grpc://host:8500/keypoint_rcnn/versions/1")
    assert isinstance(client, GrpcClient)
    assert (client.target, client.model, client.version) == ("host:8500", "keypoint_rcnn", 1)
    client.close()


def test_rest_round_trip_matches_predictor(model, rest_url, photos):
    predictor, _ = model
    client = RestClient(rest_url, MODEL_NAME, version=1, mask_format="roi")
    array = decoded(photos[1])  # a BGR array: the client sends it as PNG
    results = client.predict([photos[0], array])
    pixels = [decoded(photos[0]), array]
    names = predictor.categories.display_names()  # the classes the weights store: the shapes names
    assert names[1:] == SHAPES_CATEGORIES.names[1:]
    for got, want, image in zip(results, predictor.predict(pixels), pixels):
        assert len(want["scores"]) >= 2, "the comparison needs detections to compare"
        assert got["masks"].shape == (len(want["scores"]), *image.shape[:2])
        assert all(isinstance(name, str) for name in got["class_names"])
        arrays = {k: v for k, v in got.items() if k != "class_names"}
        assert {k: v.dtype for k, v in arrays.items()} == {k: v.dtype for k, v in want.items()}
        assert_same_detections(got, want, names)
    single = client.predict(photos[1])  # alone, it is padded less than in the batch
    assert isinstance(single, dict)
    assert_same_detections(single, predictor.predict(array), names)


def test_rest_errors_are_clear_and_leave_the_model_usable(rest_url, photos):
    client = RestClient(rest_url, MODEL_NAME, mask_format="roi")
    with pytest.raises(ServingError, match="(?s)HTTP 400: .*Unknown image file format"):
        client.predict([photos[0], b"not an image at all"])
    assert len(client.predict(photos[0])["scores"]) > 0
    with pytest.raises(ServingError, match="HTTP 404"):
        RestClient(rest_url, "no_such_model").predict(photos[0])
    with pytest.raises(ServingError, match="cannot reach"):
        RestClient("http://127.0.0.1:9", MODEL_NAME, timeout=5).predict(photos[0])


def test_grpc_round_trip_equals_rest(rest_url, grpc_target, photos):
    rest = RestClient(rest_url, MODEL_NAME, mask_format="roi").predict(photos)
    client = GrpcClient(grpc_target, MODEL_NAME, mask_format="roi")
    try:
        grpc_results = client.predict(photos)
        with pytest.raises(ServingError, match="INVALID_ARGUMENT"):
            client.predict(b"not an image at all")
    finally:
        client.close()
    for a, b in zip(grpc_results, rest):
        assert sorted(a) == sorted(b)
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


def test_grpc_outputs_keep_dtypes(model, photos):
    predict_pb2 = pytest.importorskip(f"{SERVING_API}.predict_pb2", reason=NEEDS_SERVING_API)
    outputs = run_signature(model[1].signatures["serving_default"], image_bytes=tf.constant(photos[:1]))
    response = predict_pb2.PredictResponse()
    for name, value in outputs.items():
        response.outputs[name].CopyFrom(tf.make_tensor_proto(value.numpy()))
    parsed = grpc_outputs(predict_pb2.PredictResponse.FromString(response.SerializeToString()))
    assert parsed["detection_masks"].dtype == np.float32 and parsed["num_detections"].dtype == np.int32
    for name, value in outputs.items():
        np.testing.assert_array_equal(parsed[name], value.numpy())


def test_command_line(rest_url, photos, tmp_path, capsys):
    path = tmp_path / "photo.jpg"
    path.write_bytes(photos[0])
    args = ["--url", rest_url, "--model", MODEL_NAME, "--mask-format", "roi", "--image", str(path)]
    assert serving_client.main(args) == 0
    printed = capsys.readouterr().out.splitlines()
    count = int(re.fullmatch(rf"{re.escape(str(path))}: (\d+) detections", printed[0]).group(1))
    assert count > 0 and len(printed) == count + 1
    assert all(" mask " in line and " keypoints 5" in line for line in printed[1:])
    named = [re.match(r"  (\w+) \(class (\d)\) score ", line) for line in printed[1:]]
    assert all(match and SHAPES_CATEGORIES.names[int(match.group(2))] == match.group(1) for match in named)
    assert serving_client.main(["--url", "ftp://host", "--model", "m", "--image", str(path)]) == 1
    assert "--url must start with http://" in capsys.readouterr().err


def test_mask_format_mismatch_is_reported():
    outputs = {
        "num_detections": np.array([1], np.int32),
        "detection_boxes": np.zeros((1, 2, 4), np.float32),
        "detection_scores": np.zeros((1, 2), np.float32),
        "detection_classes": np.ones((1, 2), np.int32),
        "detection_masks": np.zeros((1, 2, 28, 28), np.float32),
        "image_sizes": np.array([[480, 640]], np.int32),
    }
    with pytest.raises(ValueError, match="--mask-format roi"):
        detections_per_image(outputs, mask_format="image")
    with pytest.raises(ValueError, match="missing image_sizes"):
        detections_per_image({k: v for k, v in outputs.items() if k != "image_sizes"})
