"""python -m tfdet.infer end to end: pictures, COCO json, videos, VideoPose3D archives, bad inputs.

Random-weight zoo models with a small TEST.SCALE; TEST.SCORE_THRESH 0 and --thresh 0 give them
detections to draw and write. The Keypoint R-CNN runs in this process (built once, shared through
`run`, which is `main` minus building the model); the Mask R-CNN runs once through a real
`python -m tfdet.infer` subprocess with a Detectron `.pkl` and Detectron's infer_simple.py flags.
"""

import json
import pathlib
import shutil
import subprocess
import sys

import cv2
import numpy as np
import pytest
from pycocotools.coco import COCO

from support.child_processes import native_log_records
from support.paths import REPO_ROOT, shared_path
from support.training_fixtures import ONE_SAMPLE_ROI_ALIGN
from support.video_fixtures import decode_like_prepare_data_2d_custom, write_video
from tfdet.config import load_config
from tfdet.data.coco_classes import model_categories
from tfdet.imaging.image_io import UnreadableImage, list_inputs, pdf_page_with_image, read_image, write_picture
from tfdet.infer import UsageError, check_usage, main, parse_args, run
from tfdet.inference import Predictor
from tfdet.outputs.videopose3d import VideoPose3DArchive

MODEL_OVERRIDES = ["TEST.SCORE_THRESH", "0.0", "TEST.DETECTIONS_PER_IM", "8", "TEST.RPN_PRE_NMS_TOP_N", "300",
                   "TEST.RPN_POST_NMS_TOP_N", "100", *ONE_SAMPLE_ROI_ALIGN]  # fmt: skip
# The subprocess's Mask R-CNN with 8-wide bottlenecks (same blobs, stage outputs of 256-2048 channels): a .pkl of
# 24.6 M values instead of 44 M for the test to write and the CLI to read; what the CLI does is the same.
NARROW = ("RESNETS.WIDTH_PER_GROUP", "8")
KEYPOINT_CFG = ("detectron", "configs", "12_2017_baselines", "e2e_keypoint_rcnn_R-50-FPN_1x.yaml")
MASK_CFG = ("detectron", "configs", "12_2017_baselines", "e2e_mask_rcnn_R-50-FPN_1x.yaml")


def demo_photos(count=2):
    return sorted(shared_path("data", "detectron_demo").glob("*.jpg"))[:count]


@pytest.fixture(scope="module")
def keypoint_predictor():
    with pytest.warns(UserWarning):  # the zoo file names a head function Detectron later renamed
        cfg = load_config(shared_path(*KEYPOINT_CFG), ["TEST.SCALE", "160", "TEST.MAX_SIZE", "256"] + MODEL_OVERRIDES)
    return Predictor(cfg)


def run_keypoint_cli(predictor, argv):
    """The CLI in this process with the module's model: argv parsed as `main` parses it."""
    return run(
        parse_args(["--cfg", str(shared_path(*KEYPOINT_CFG)), "--weights", "unused.weights.h5"] + argv), predictor
    )


def coco_ground_truth(images):
    """A minimal ground-truth COCO object for {image_id: (height, width)}, built independently of tfdet."""
    coco = COCO()
    coco.dataset = {
        "images": [{"id": i, "height": h, "width": w} for i, (h, w) in images.items()],
        "annotations": [],
        "categories": [{"id": c, "name": str(c)} for c in range(1, 91)],
    }
    coco.createIndex()
    return coco


def image_ids_by_name(output):
    listing = json.loads((output / "images.json").read_text())
    return {pathlib.Path(entry["file_name"]).name: entry["id"] for entry in listing["images"]}


def test_mask_rcnn_subprocess_with_detectron_command_line(tmp_path):
    from porting.detectron_writer import model_to_blobs, write_detectron_pkl
    from tfdet.modeling import build_model

    cfg = load_config(shared_path(*MASK_CFG), list(NARROW))
    weights = tmp_path / "model_final.pkl"
    write_detectron_pkl(weights, model_to_blobs(build_model(cfg), cfg.MRCNN.ROI_MASK_HEAD), cfg.dump())
    folder = tmp_path / "photos"
    folder.mkdir()
    for photo in demo_photos():
        shutil.copy(photo, folder)
    (folder / "notes.txt").write_text("not an image; --image-ext jpg skips it")
    output = tmp_path / "out"
    command = [sys.executable, "-m", "tfdet.infer", "--cfg", str(shared_path(*MASK_CFG)), "--wts", str(weights),
               "--output-dir", str(output), "--image-ext", "jpg", "--output-ext", "jpg", "--thresh", "0.0",
               str(folder), "TEST.SCALE", "256", "TEST.MAX_SIZE", "384", *NARROW] + MODEL_OVERRIDES  # fmt: skip
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 images" in done.stdout and "warm-up: the first image took" in done.stdout and "steady:" in done.stdout
    assert native_log_records(done.stderr) == [], "TensorFlow's native log records reach the terminal"

    ids = image_ids_by_name(output)
    assert sorted(ids) == sorted(p.name for p in demo_photos())
    sizes = {}
    for photo in demo_photos():
        image = cv2.imread(str(photo))
        picture = cv2.imread(str(output / f"{photo.name}.jpg"))
        assert picture is not None and picture.shape == image.shape
        drawn = np.abs(picture.astype(int) - image.astype(int)).max(axis=2) > 40  # beyond JPEG noise
        assert drawn.sum() > 500, "detections are drawn"
        sizes[ids[photo.name]] = image.shape[:2]
    results = json.loads((output / "detections.json").read_text())
    assert results and all("segmentation" in r for r in results)
    gt = coco_ground_truth(sizes)
    loaded = gt.loadRes(str(output / "detections.json"))
    assert len(loaded.getAnnIds()) == len(results)
    assert {r["image_id"] for r in results} == set(sizes)


def test_keypoint_photos_with_json_per_image(tmp_path, keypoint_predictor):
    photos = demo_photos()
    output = tmp_path / "out"
    pattern = str(photos[0].parent / "1[56]*.jpg")
    argv = ["--input", pattern, "--output", str(output), "--thresh", "0", "--kp-thresh=-1e9", "--json-per-image"]
    status = run_keypoint_cli(keypoint_predictor, argv)
    assert status == 0
    ids = image_ids_by_name(output)
    sizes = {}
    for name, image_id in ids.items():
        image = cv2.imread(str(photos[0].parent / name))
        picture = cv2.imread(str(output / f"{name}.png"))
        assert picture.shape == image.shape
        sizes[image_id] = image.shape[:2]
        per_image = json.loads((output / f"{name}.json").read_text())
        assert per_image and {r["image_id"] for r in per_image} == {image_id}
    gt = coco_ground_truth(sizes)
    results = gt.loadRes(str(output / "detections.json"))
    keypoints = [ann["keypoints"] for ann in results.anns.values()]
    assert keypoints and all(len(k) == 17 * 3 for k in keypoints)
    assert all(ann["category_id"] == 1 for ann in results.anns.values())
    # images.json is a COCO file of its own, enough to load the results with.
    listing = COCO(str(output / "images.json"))
    assert len(listing.loadRes(str(output / "detections.json")).getAnnIds()) == len(keypoints)


def count_frames(path):
    capture = cv2.VideoCapture(str(path))
    count = 0
    while capture.read()[0]:
        count += 1
    capture.release()
    return count


def test_video_with_videopose3d_archive(tmp_path, keypoint_predictor):
    photo = cv2.resize(cv2.imread(str(demo_photos()[0])), (200, 150))
    frames = [np.roll(photo, 4 * i, axis=1) for i in range(5)]
    video = tmp_path / "walk.avi"
    write_video(video, frames)
    output = tmp_path / "out"
    status = run_keypoint_cli(keypoint_predictor, ["--input", str(video), "--output", str(output), "--videopose3d"])
    assert status == 0
    boxes, keypoints, metadata, detected = decode_like_prepare_data_2d_custom(output / "walk.avi.npz")
    assert keypoints.shape == (5, 17, 2) and boxes.shape == (5, 4)
    assert metadata == {"w": 200, "h": 150}
    assert detected.all() and np.isfinite(keypoints).all()
    assert count_frames(output / "walk.avi.mp4") == 5
    capture = cv2.VideoCapture(str(output / "walk.avi.mp4"))
    size = capture.get(cv2.CAP_PROP_FRAME_WIDTH), capture.get(cv2.CAP_PROP_FRAME_HEIGHT)
    capture.release()
    assert size == (800, 600), "150-px frames are drawn 4x larger, as pictures of small images are"

    archive = np.load(output / "walk.avi.npz", allow_pickle=True)
    frame = archive["keypoints"][0][1][0]
    assert frame.shape == (4, 17) and frame.dtype == np.float32
    assert np.all((frame[3] > 0) & (frame[3] <= 1)), "row 4 holds heatmap probabilities"
    # Each person row of the archive is a detection the json holds for that frame, keypoints included.
    first = [r for r in json.loads((output / "detections.json").read_text()) if r["image_id"] == 1]
    person, person_keypoints = archive["boxes"][0][1], archive["keypoints"][0][1]
    assert len(person) == len(person_keypoints) == len(first)
    for box, points in zip(person, person_keypoints):
        x, y, w, h = box[0], box[1], box[2] - box[0] + 1, box[3] - box[1] + 1
        assert any(
            np.allclose(r["bbox"], [x, y, w, h], atol=1e-3)
            and np.isclose(r["score"], box[4])
            and np.allclose(np.reshape(r["keypoints"], (17, 3))[:, :2], points[:2].T, atol=1e-3)
            for r in first
        )


def test_videopose3d_frames_without_people_are_kept(tmp_path):
    def frame(boxes, scores):
        n = len(scores)
        kps = np.zeros((n, 17, 3), np.float32)
        kps[:, :, 0], kps[:, :, 1], kps[:, :, 2] = np.asarray(boxes)[:, None, 0] + np.arange(17), 40.0, 3.0
        return {
            "boxes": np.asarray(boxes, np.float32).reshape(-1, 4),
            "scores": np.asarray(scores, np.float32),
            "classes": np.ones(n, np.int32),
            "keypoints": kps,
            "keypoint_probs": np.full((n, 17), 0.5, np.float32),
        }

    archive = VideoPose3DArchive(num_classes=2)
    archive.add(frame([[10, 10, 50, 90], [0, 0, 5, 5]], [0.9, 0.3]))
    archive.add(frame(np.zeros((0, 4)), []))
    archive.add(frame([[30, 10, 70, 90]], [0.8]))
    archive.save(tmp_path / "clip.mp4.npz", width=120, height=100)
    boxes, keypoints, metadata, detected = decode_like_prepare_data_2d_custom(tmp_path / "clip.mp4.npz")
    assert detected.tolist() == [True, False, True]
    np.testing.assert_allclose(boxes[1], [20, 10, 60, 90])  # interpolated between its neighbours
    np.testing.assert_allclose(keypoints[:, 0, 0], [10, 20, 30])
    stored = np.load(tmp_path / "clip.mp4.npz", allow_pickle=True)
    assert stored["keypoints"][1] is None and stored["segments"][1] is None
    assert stored["boxes"][1][0] == [] and stored["boxes"][1][1].shape == (0, 5)


def test_folder_with_broken_and_unusual_images(tmp_path, keypoint_predictor, capsys):
    photo = cv2.resize(cv2.imread(str(demo_photos()[0])), (180, 120))
    folder = tmp_path / "mixed"
    folder.mkdir()
    gray = cv2.cvtColor(photo, cv2.COLOR_BGR2GRAY)
    cv2.imwrite(str(folder / "gray.jpg"), gray)
    cv2.imwrite(str(folder / "alpha.png"), np.dstack([photo, np.full(photo.shape[:2], 128, np.uint8)]))
    cv2.imwrite(str(folder / "deep.png"), photo.astype(np.uint16) * 257)
    (folder / "corrupt.jpg").write_bytes(b"\xff\xd8\xff\xe0" + bytes(range(256)) * 4)
    jpeg = cv2.imencode(".jpg", photo)[1].tobytes()
    (folder / "truncated.jpg").write_bytes(jpeg[: len(jpeg) // 2])
    output = tmp_path / "out"
    # --thresh above any score: nothing is drawn, so each picture is the image as it was read.
    status = run_keypoint_cli(
        keypoint_predictor, [str(folder), "--output-dir", str(output), "--thresh", "1.1", "--always-out"]
    )
    assert status == 1
    printed = capsys.readouterr()
    errors = printed.err
    assert "corrupt.jpg" in errors and "truncated.jpg" in errors
    assert "gray.jpg" not in errors and "alpha.png" not in errors and "deep.png" not in errors
    # Each failure is named once per line, as it happens and in the summary.
    named = [line for line in (errors + printed.out).splitlines() if "corrupt.jpg" in line]
    assert len(named) == 2 and all(line.count("corrupt.jpg") == 1 for line in named), named
    # Off a terminal no progress bar is drawn: nothing for the summary to run into in a redirected log.
    assert "\r" not in errors and "%|" not in errors
    assert printed.out.startswith("3 images, 0 video frames")
    # Pictures of images under 512 px are drawn 5x larger here (visualize.PICTURE_MIN_SIDE): pixel for pixel
    # the image OpenCV enlarges, as read.
    def enlarged(image):
        return cv2.resize(image, (900, 600), interpolation=cv2.INTER_LINEAR)

    np.testing.assert_array_equal(cv2.imread(str(output / "alpha.png.png")), enlarged(photo))
    np.testing.assert_array_equal(cv2.imread(str(output / "deep.png.png")), enlarged(photo))
    np.testing.assert_array_equal(
        cv2.imread(str(output / "gray.jpg.png")), enlarged(np.dstack([cv2.imread(str(folder / "gray.jpg"), 0)] * 3))
    )
    assert sorted(image_ids_by_name(output)) == ["alpha.png", "deep.png", "gray.jpg"]


def test_detectron_command_line_parses():
    flags = "--cfg c.yaml --wts w.pkl --output-dir o --image-ext png --always-out --output-ext pdf --thresh 0.5"
    args = parse_args(flags.split() + ["--kp-thresh", "1", "photos", "TEST.SCALE", "600"])
    assert (args.weights, args.output, args.input, args.image_ext, args.output_ext) == (
        "w.pkl",
        "o",
        "photos",
        "png",
        "pdf",
    )
    assert args.always_out and (args.thresh, args.kp_thresh) == (0.5, 1.0)
    assert args.opts == ["TEST.SCALE", "600"]


def test_our_command_line_parses_with_detectron_defaults():
    args = parse_args("--cfg c.yaml --weights w.h5 --input a.mp4 TEST.SCALE 600 --output o".split())
    assert (args.input, args.opts, args.output) == ("a.mp4", ["TEST.SCALE", "600"], "o")
    assert (args.thresh, args.kp_thresh, args.always_out) == (0.7, 2.0, False)


@pytest.mark.parametrize(
    "argv", ["--cfg c.yaml --wts w", "--cfg c.yaml photo.jpg", "--cfg c --wts w photo.jpg TEST.SCALE", "--wts w p"]
)
def test_incomplete_command_lines_are_refused(argv):
    with pytest.raises(SystemExit):
        parse_args(argv.split())


def test_model_categories(tmp_path):
    coco = model_categories(81)
    assert coco.names[1] == "person" and coco.names[80] == "toothbrush" and coco.json_ids[80] == 90
    assert len(coco.coco_categories()) == 80
    assert model_categories(2, keypoints_on=True).names == ("__background__", "person")
    assert model_categories(4).names is None and model_categories(4).json_ids == (0, 1, 2, 3)
    dataset = tmp_path / "shapes.json"
    dataset.write_text(json.dumps({"categories": [{"id": 7, "name": "square"}, {"id": 3, "name": "circle"}]}))
    named = model_categories(3, dataset_json=dataset)
    # the json's order, not sorted by id (Detectron's getCatIds order, as the roidb maps them)
    assert named.names == ("__background__", "square", "circle") and named.json_ids == (0, 7, 3)
    assert named.skeleton is None
    with pytest.raises(ValueError, match="2 categories; the model has 80"):
        model_categories(81, dataset_json=dataset)
    dataset.write_text(json.dumps({"categories": [{"id": 1, "name": "square", "keypoints": ["a", "b", "c"],
                                                   "skeleton": [[1, 2], [2, 3]]}]}))
    assert model_categories(2, dataset_json=dataset).skeleton == ((0, 1), (1, 2))  # COCO's 1-based -> 0-based


def test_usage_errors_are_caught_before_the_model_is_built(tmp_path):
    with pytest.warns(UserWarning):
        keypoint_cfg = load_config(shared_path(*KEYPOINT_CFG))
    args = parse_args(["--cfg", "c", "--wts", "w", str(tmp_path / "missing.jpg")])
    with pytest.raises(UsageError, match="no such file or folder"):
        check_usage(args, keypoint_cfg)
    args = parse_args(["--cfg", "c", "--wts", "w", "--videopose3d", str(demo_photos()[0])])
    with pytest.raises(UsageError, match="keypoint model"):
        check_usage(args, load_config(shared_path(*MASK_CFG)))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no \\*.jpg files"):
        list_inputs(str(tmp_path / "empty"), "jpg")
    with pytest.raises(FileNotFoundError, match="matches no file"):
        list_inputs(str(tmp_path / "*.png"))


def test_main_reports_a_missing_input_in_one_line(tmp_path, capsys):
    status = main(
        ["--cfg", str(shared_path(*MASK_CFG)), "--wts", str(tmp_path / "w.pkl"), str(tmp_path / "nothing.jpg")]
    )
    assert status == 2
    assert capsys.readouterr().err.strip() == f"error: {tmp_path / 'nothing.jpg'}: no such file or folder"
    photo = str(demo_photos()[0])
    assert main(["--cfg", str(shared_path(*MASK_CFG)), "--wts", str(tmp_path / "w.pkl"), photo]) == 2
    assert capsys.readouterr().err.strip() == f"error: weights file not found: {tmp_path / 'w.pkl'}"


def test_pdf_picture_holds_the_image(tmp_path, rng):
    image = rng.integers(0, 255, (30, 40, 3), dtype=np.uint8)
    image[:, :20] = (255, 0, 0)
    path = tmp_path / "picture.pdf"
    write_picture(path, image)
    data = path.read_bytes()
    assert data.startswith(b"%PDF-1.4") and data.rstrip().endswith(b"%%EOF")
    # Every cross-reference offset points at its object's header.
    xref = int(data[data.rindex(b"startxref") + 9 :].split()[0])
    table = data[xref:].split(b"\n")
    count = int(table[1].split()[1])
    for number in range(1, count):
        offset = int(table[2 + number].split()[0])
        assert data[offset:].startswith(f"{number} 0 obj".encode())
    stream = data[data.index(b"stream\n") + 7 : data.index(b"\nendstream")]
    decoded = cv2.imdecode(np.frombuffer(stream, np.uint8), cv2.IMREAD_COLOR)
    assert decoded.shape == image.shape
    assert np.abs(decoded[:, :18].astype(int) - (255, 0, 0)).mean() < 8
    assert data == pdf_page_with_image(image)


def test_unreadable_files_raise_with_their_name(tmp_path):
    for name, content in (
        ("empty.png", b""),
        ("text.jpg", b"hello"),
        ("cut.jpg", cv2.imencode(".jpg", np.zeros((64, 64, 3), np.uint8))[1].tobytes()[:300]),
    ):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(UnreadableImage, match=name):
            read_image(tmp_path / name)
    with pytest.raises(UnreadableImage, match="missing.jpg"):
        read_image(tmp_path / "missing.jpg")
