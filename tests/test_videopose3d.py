"""VideoPose3D's users: archives numpy 1.x and 2.x load, and `python -m tfdet.infer_video`.

The archives' pickles must name only modules numpy 1.x has (numpy 2's own name `numpy._core`, which
numpy < 1.26 cannot import); the pickle stream is read opcode by opcode. The command line runs in
this process with the tiny config (17 keypoints, person only, random weights), the model built once.
"""

import glob
import io
import os
import pickle
import pickletools
import shutil
import subprocess
import sys
import warnings
import zipfile

import cv2
import h5py
import numpy as np
import pytest

from support.http_mirror import unused_loopback_url
from support.paths import REPO_ROOT, shared_path
from support.training_fixtures import AFFINE_BODY, ONE_SAMPLE_ROI_ALIGN, TINY_CONFIG, tiny_cfg
from support.video_fixtures import decode_like_prepare_data_2d_custom, write_video
from tfdet import infer, infer_video
from tfdet.imaging.image_io import list_inputs
from tfdet.inference import Predictor
from tfdet.outputs.videopose3d import PortablePickler, VideoPose3DArchive, write_npy

# A person-only, 17-keypoint model (what VideoPose3D's scripts assume) whose every frame has detections.
PERSON_MODEL = ["MODEL.NUM_CLASSES", "2", "KRCNN.NUM_KEYPOINTS", "17", "MODEL.MASK_ON", "False", "TEST.SCORE_THRESH",
                "0.0", "TEST.DETECTIONS_PER_IM", "4", *AFFINE_BODY, *ONE_SAMPLE_ROI_ALIGN]  # fmt: skip
DOCUMENTED_WEIGHTS = (
    "https://dl.fbaipublicfiles.com/detectron/37698009/12_2017_baselines/e2e_keypoint_rcnn_R-101-FPN_s1x.yaml."
    "08_45_57.YkrJgP6O/output/train/keypoints_coco_2014_train:keypoints_coco_2014_valminusminival/"
    "generalized_rcnn/model_final.pkl"
)


def pickled_globals(stream):
    """(module, name) of every GLOBAL and STACK_GLOBAL in a pickle stream (the names it imports on load)."""
    found, pushed, memo = [], [], {}
    last = None  # the string the last opcode pushed, for the memo
    for opcode, arg, _ in pickletools.genops(stream):
        name = opcode.name
        if name in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[arg] = last
        elif name == "MEMOIZE":
            memo[len(memo)] = last
        elif name in ("FRAME", "PROTO"):
            pass
        elif name in ("UNICODE", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8"):
            last = arg
            pushed.append(arg)
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            last = memo.get(arg)
            pushed.append(last)
        elif name == "GLOBAL":
            found.append(tuple(arg.split(" ", 1)))
            last = None
        elif name == "STACK_GLOBAL":
            found.append((pushed[-2], pushed[-1]))
            last = None
        else:
            last = None
    return set(found)


def npz_pickled_globals(path):
    """{member: pickled_globals} of an .npz's pickled (object array) members."""
    names = {}
    with zipfile.ZipFile(path) as archive:
        for member in archive.namelist():
            with archive.open(member) as f:
                if np.lib.format.read_magic(f) == (1, 0):
                    _, _, dtype = np.lib.format.read_array_header_1_0(f)
                else:
                    _, _, dtype = np.lib.format.read_array_header_2_0(f)
                if dtype.hasobject:
                    names[member] = pickled_globals(f.read())
    return names


def load_quietly(path):
    """np.load as VideoPose3D's prepare_data_2d_custom.py calls it, any warning an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.load(path, encoding="latin1", allow_pickle=True) as data:
            return {name: data[name] for name in data.files}


def person_frame(boxes, scores, shift=0.0, masks=False):
    n = len(scores)
    keypoints = np.zeros((n, 17, 3), np.float32)
    keypoints[:, :, 0] = np.asarray(boxes, np.float32).reshape(-1, 4)[:, None, 0] + np.arange(17) + shift
    keypoints[:, :, 1], keypoints[:, :, 2] = 40.0, 3.0
    detections = {
        "boxes": np.asarray(boxes, np.float32).reshape(-1, 4),
        "scores": np.asarray(scores, np.float32),
        "classes": np.ones(n, np.int32),
        "keypoints": keypoints,
        "keypoint_probs": np.full((n, 17), 0.5, np.float32),
    }
    if masks:
        detections["masks"] = np.zeros((n, 100, 120), np.uint8)
        detections["masks"][:, 10:90, 10:50] = 1
    return detections


def test_archive_pickles_name_only_numpy_ndarray_and_dtype(tmp_path):
    archive = VideoPose3DArchive(num_classes=2)
    archive.add(person_frame([[10, 10, 50, 90], [0, 0, 5, 5]], [0.9, 0.3], masks=True))
    archive.add(person_frame(np.zeros((0, 4)), [], masks=True))
    archive.add(person_frame([[30, 10, 70, 90]], [0.8], masks=True))
    path = tmp_path / "clip.mp4.npz"
    archive.save(path, width=120, height=100)

    names = npz_pickled_globals(path)
    assert sorted(names) == ["boxes.npy", "keypoints.npy", "metadata.npy", "segments.npy"]
    for member, found in names.items():
        assert not any(module.startswith("numpy._core") for module, _ in found), (member, found)
    # What numpy 1.x and 2.x both import: numpy.ndarray and numpy.dtype (metadata is a dict of ints).
    shared = {("numpy", "ndarray"), ("numpy", "dtype")}
    assert names["boxes.npy"] == names["keypoints.npy"] == names["segments.npy"] == shared

    data = load_quietly(path)
    assert data["metadata"].item() == {"w": 120, "h": 100}
    assert data["boxes"].shape == (3,) and data["boxes"].dtype == object
    np.testing.assert_array_equal(data["boxes"][0][1], np.float32([[10, 10, 50, 90, 0.9], [0, 0, 5, 5, 0.3]]))
    assert data["boxes"][0][1].dtype == np.float32 and data["boxes"][0][0] == []
    assert data["boxes"][1][1].shape == (0, 5) and data["keypoints"][1] is None and data["segments"][1] is None
    person = data["keypoints"][2][1][0]
    assert person.shape == (4, 17) and person.dtype == np.float32 and person.flags.writeable
    np.testing.assert_array_equal(person[0], 30 + np.arange(17))
    np.testing.assert_array_equal(person[3], 0.5)
    rle = data["segments"][0][1][0]
    assert rle["size"] == [100, 120] and isinstance(rle["counts"], bytes)

    boxes, keypoints, metadata, detected = decode_like_prepare_data_2d_custom(path)
    assert detected.tolist() == [True, False, True] and metadata == {"w": 120, "h": 100}
    np.testing.assert_allclose(keypoints[:, 0, 0], [10, 20, 30])  # the middle frame interpolated


def test_plain_savez_names_numpy_core_which_the_check_catches(tmp_path):
    """The reason for PortablePickler, and proof that npz_pickled_globals would see a regression: numpy's own
    pickling names its core module, `numpy._core` under numpy 2 (which numpy 1.x cannot import), `numpy.core`
    under numpy 1.x."""
    core = "numpy._core" if int(np.__version__.split(".")[0]) >= 2 else "numpy.core"
    entries = np.empty(1, dtype=object)
    entries[0] = [[], np.ones((2, 5), np.float32)]
    np.savez_compressed(tmp_path / "plain.npz", boxes=entries)
    (found,) = npz_pickled_globals(tmp_path / "plain.npz").values()
    assert (f"{core}.multiarray", "_reconstruct") in found


def test_portable_pickler_round_trips_arrays_and_scalars():
    values = [
        np.arange(6, dtype=np.float32).reshape(2, 3).T,  # Fortran order
        np.zeros((0, 5), np.float32),
        np.array(3.5),
        np.array([True, False]),
        np.arange(4, dtype=">i2"),
        np.array(["ab", "c"]),
        np.array([(1, 2.0)], dtype=[("a", "<i4"), ("b", "<f8")]),
        np.float32(1.5),
        np.bool_(True),
        np.int64(-7),
        np.longdouble(1) / 3,
        np.datetime64("2019-07-01T17:16"),
        {"nested": [np.uint8(9), None, b"\x00\xff"]},
    ]
    entries = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        entries[i] = value
    stream = io.BytesIO()
    PortablePickler(stream, protocol=4).dump(entries)
    assert not any(module.startswith("numpy._core") for module, _ in pickled_globals(stream.getvalue()))
    loaded = pickle.loads(stream.getvalue())
    # What numpy's own pickles give back (they, too, load ">i2" as native int16).
    expected = pickle.loads(pickle.dumps(entries, protocol=3))
    for value, back, numpy_back in zip(values[:-1], loaded[:-1], expected[:-1]):
        assert type(back) is type(numpy_back) is type(value) and back.dtype == numpy_back.dtype
        np.testing.assert_array_equal(back, value)
        if isinstance(value, np.ndarray):
            assert back.shape == value.shape and back.flags.f_contiguous == value.flags.f_contiguous
    nested = loaded[-1]["nested"]
    assert type(nested[0]) is np.uint8 and nested[0] == 9 and nested[1:] == [None, b"\x00\xff"]

    numeric = io.BytesIO()  # write_npy leaves arrays without objects to numpy's own writer
    write_npy(numeric, np.arange(3.0))
    numeric.seek(0)
    np.testing.assert_array_equal(np.load(numeric), np.arange(3.0))


def prepare_data_2d_custom(folder):
    """VideoPose3D's data/prepare_data_2d_custom.py main: {canonical name: 2D keypoints}, {name: metadata}."""
    positions_2d, video_metadata = {}, {}
    for f in glob.glob(str(folder) + "/*.npz"):
        canonical_name = os.path.splitext(os.path.basename(f))[0]
        _, keypoints, metadata, _ = decode_like_prepare_data_2d_custom(f)
        positions_2d[canonical_name] = {"custom": [keypoints.astype("float32")]}
        video_metadata[canonical_name] = metadata
    return positions_2d, video_metadata


@pytest.fixture(scope="module")
def person_predictor():
    return Predictor(tiny_cfg(*PERSON_MODEL))


def test_videopose3d_command_line_writes_the_dataset(tmp_path, person_predictor, monkeypatch, capsys):
    rng = np.random.default_rng(0)
    folder = tmp_path / "input_directory"
    folder.mkdir()
    base = rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)
    write_video(folder / "walk.mp4", [np.roll(base, 3 * i, axis=1) for i in range(3)], codec="mp4v")
    write_video(folder / "jump.mp4", [np.roll(base, 5 * i, axis=0) for i in range(2)], codec="mp4v")
    write_video(folder / "other.avi", [base], codec="mp4v")  # not *.mp4: left alone, as the script's glob leaves it
    (folder / "notes.txt").write_text("not a video")
    weights = tmp_path / "model_final.weights.h5"
    h5py.File(weights, "w").close()  # an empty weights file: the Predictor below stands in for loading it

    class BuiltPredictor:
        @staticmethod
        def from_checked(cfg, checked_weights, categories):  # what tfdet.infer builds from what it checked
            assert checked_weights.path == str(weights) and cfg.dump() == person_predictor.cfg.dump()
            return person_predictor

    monkeypatch.setattr(infer, "Predictor", BuiltPredictor)
    output = tmp_path / "output_directory"
    argv = ["--cfg", str(TINY_CONFIG), "--output-dir", str(output), "--image-ext", "mp4", "--wts", str(weights),
            "--thresh", "0.5", "--output-ext", "pdf", str(folder), *PERSON_MODEL]  # fmt: skip
    assert infer_video.main(argv) == 0
    assert "5 video frames" in capsys.readouterr().out
    written = sorted(p.name for p in output.iterdir())
    assert written == ["detections.json", "images.json", "jump.mp4.npz", "walk.mp4.npz"]  # no pictures

    positions_2d, video_metadata = prepare_data_2d_custom(output)
    assert sorted(positions_2d) == ["jump.mp4", "walk.mp4"]  # the subjects run.py's --viz-subject names
    assert video_metadata == {"walk.mp4": {"w": 64, "h": 48}, "jump.mp4": {"w": 64, "h": 48}}
    for name, frames in (("walk.mp4", 3), ("jump.mp4", 2)):
        (keypoints,) = positions_2d[name]["custom"]
        assert keypoints.shape == (frames, 17, 2) and np.isfinite(keypoints).all()
        stored = load_quietly(output / f"{name}.npz")
        for frame in range(frames):
            person_boxes, person_keypoints = stored["boxes"][frame][1], stored["keypoints"][frame][1]
            assert len(person_boxes) == len(person_keypoints) == 4
            best = np.argmax(person_boxes[:, 4])  # the detection VideoPose3D keeps
            np.testing.assert_array_equal(keypoints[frame], person_keypoints[best][:2].T)
        assert all(not any(m.startswith("numpy._core") for m, _ in found)
                   for found in npz_pickled_globals(output / f"{name}.npz").values())  # fmt: skip


def test_videopose3d_command_lines_map_to_tfdet_infer(tmp_path):
    folder = tmp_path / "clips [2019]"  # glob characters in the folder name are taken literally
    folder.mkdir()
    (folder / "a.mp4").write_bytes(b"")
    (folder / "b.MOV").write_bytes(b"")
    spec = os.path.join(glob.escape(str(folder)), "*.mp4")
    argv = ["--cfg", "kp.yaml", "--output-dir", "out", "--image-ext", "mp4", "--wts", "model_final.pkl", str(folder)]
    assert infer_video.infer_argv(argv) == [
        "--cfg=kp.yaml", "--weights=model_final.pkl", "--output=out", f"--input={spec}", "--videopose3d", "--no-vis",
    ]  # fmt: skip
    # Detectron's picture flags are accepted; defaults: /tmp/infer_simple, mp4; KEY VALUE pairs pass through.
    argv = ["--cfg", "kp.yaml", "--wts", "w.pkl", "--always-out", "--output-ext", "png", "--kp-thresh", "1"]
    argv.append(str(folder))
    command = infer_video.infer_argv(argv + ["TEST.SCALE", "600"])
    assert command[2:4] == ["--output=/tmp/infer_simple", f"--input={spec}"] and command[-2:] == ["TEST.SCALE", "600"]
    parsed = infer.parse_args(command)
    assert parsed.videopose3d and parsed.no_vis and parsed.opts == ["TEST.SCALE", "600"]
    assert [p.name for p in list_inputs(parsed.input)] == ["a.mp4"]
    video = str(folder / "b.MOV")  # one file: a video whatever --image-ext says
    assert infer_video.infer_argv(["--cfg", "c", "--wts", "w", video])[3] == f"--input={video}"


@pytest.mark.parametrize(
    "argv, error",
    [
        (["{folder}/nothing"], "{folder}/nothing: no such file or folder"),
        (["--image-ext", "webm", "{folder}"], "{folder}: no *.webm files in this folder"),
        (["--image-ext", "jpg", "{folder}"], "{folder}/photo.jpg: not a video file name tfdet reads (extensions: "),
        (["{folder}/photo.jpg"], "{folder}/photo.jpg: not a video file name tfdet reads (extensions: "),
    ],
)
def test_inputs_that_give_no_archive_are_refused_in_one_line(tmp_path, capsys, argv, error):
    (tmp_path / "photo.jpg").write_bytes(b"")
    argv = ["--cfg", "c.yaml", "--wts", "w.pkl"] + [a.format(folder=tmp_path) for a in argv]
    assert infer_video.main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: " + error.format(folder=tmp_path))


def test_the_documented_command_line_downloads_its_weights_url(tmp_path):
    """VideoPose3D's INFERENCE.md command, program name changed, its --wts a Detectron URL: downloaded (here from
    a loopback mirror where nothing answers: one line naming the URL and where to put the file, exit status 2)."""
    config = tmp_path / "configs" / "12_2017_baselines" / "e2e_keypoint_rcnn_R-101-FPN_s1x.yaml"
    config.parent.mkdir(parents=True)
    shutil.copyfile(shared_path("detectron", "configs", "12_2017_baselines", config.name), config)
    (tmp_path / "input_directory").mkdir()
    (tmp_path / "input_directory" / "walk.mp4").write_bytes(b"")
    command = [sys.executable, "-m", "tfdet.infer_video",
               "--cfg", "configs/12_2017_baselines/e2e_keypoint_rcnn_R-101-FPN_s1x.yaml",
               "--output-dir", "output_directory", "--image-ext", "mp4",
               "--wts", DOCUMENTED_WEIGHTS, "input_directory"]  # fmt: skip
    path = os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])
    mirror, cache = unused_loopback_url(), tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": path, "TFDET_DETECTRON_URL": mirror, "TFDET_CACHE": str(cache)}
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2
    below_base = DOCUMENTED_WEIGHTS.removeprefix("https://dl.fbaipublicfiles.com/detectron/")
    local = cache / "detectron" / below_base
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: cannot download {mirror}/{below_base} (Connection refused); without network, put the file at "
        f"{local} and the text of {mirror}/{below_base}.md5sum at {local}.md5sum"
    )
    assert not (tmp_path / "output_directory").exists()


def test_no_arguments_print_the_help_and_missing_flags_exit(capsys):
    assert infer_video.main([]) == 1
    assert "--image-ext" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        infer_video.main(["--cfg", "c.yaml", "videos"])  # --wts is required
    with pytest.raises(SystemExit):
        infer_video.main(["--cfg", "c.yaml", "--wts", "w.pkl", "videos", "TEST.SCALE"])
