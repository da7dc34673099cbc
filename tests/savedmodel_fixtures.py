"""Helpers of the SavedModel tests: a tiny shapes model trained briefly (once per test session, in a
child process that runs while the tests do other work), shapes images, and the comparison of
served detections with the Predictor's."""

import os
import pathlib
import subprocess
import sys
import time

import numpy as np

from tfdet.config import load_config
from tfdet.data import shapes

TESTS_DIR = pathlib.Path(__file__).resolve().parent
# 80 iterations on 8 images at a constant LR after a short warm-up (~36 s of CPU on one thread: ~12 s for
# the first step's tracing, 0.27 s a step): the classifier has learned the classes' prior, not yet shapes
# from background (scores 0.12-0.16 on shapes and on a blank image alike); measured in two runs, shapes
# val images (cropped or enlarged too) keep 12-75 detections above 0.05 from 100 proposals. Shorter runs
# are in a chaotic phase (at 40-60 iterations, 0 to 100 detections per image depending on the LR), and
# ONE_SAMPLE_ROI_ALIGN saves no measurable time.
TRAIN_OVERRIDES = (
    "SOLVER.MAX_ITER", "80", "SOLVER.STEPS", "[0, 100000]", "SOLVER.BASE_LR", "0.04", "SOLVER.WARM_UP_ITERS", "10",
    "TRAIN.USE_FLIPPED", "False", "TRAIN.SNAPSHOT_ITERS", "100000",
)  # fmt: skip
# The trained model's test settings: detections from Detectron's default score threshold on (the 80-iteration
# model scores about 0.12-0.16, so a higher threshold can leave too few to compare).
TINY_TEST = ("TEST.SCORE_THRESH", "0.05")

TRAIN_CHILD = r"""
import pathlib, sys
from training_fixtures import shapes_roidb, tiny_cfg
from tfdet.engine.trainer import Trainer

out = pathlib.Path(sys.argv[1])
cfg = tiny_cfg(*sys.argv[2:], "OUTPUT_DIR", str(out))
trainer = Trainer(cfg, roidb=shapes_roidb(out / "shapes", num_images=8), progress=False)
trainer.initialize()
trainer.train()
"""


class TinyTraining:
    """The tiny Mask + Keypoint R-CNN trained for TRAIN_OVERRIDES on 8 shapes images.

    Trained once per session under pytest's base temporary folder; `start` returns at once, with
    the training running in a child process unless an earlier test module already trained it.
    """

    def __init__(self, tmp_path_factory):
        base = tmp_path_factory.getbasetemp()
        if os.environ.get("PYTEST_XDIST_WORKER"):  # pytest-xdist: the session's folder all workers share
            base = base.parent
        self.directory = base / "savedmodel_tiny_trained"
        self.weights = self.directory / "model_final.weights.h5"
        self.config = self.directory / "config.yaml"
        self._done = self.directory / "trained"
        self._process = None
        try:
            self.directory.mkdir()  # the process that creates the folder trains; the others wait for it
        except FileExistsError:
            return
        self._log = self.directory / "training.log"
        # One thread per TensorFlow pool: the training runs beside the tests' own work on few cores.
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]),
            TF_NUM_INTRAOP_THREADS="1",
            TF_NUM_INTEROP_THREADS="1",
        )
        self._process = subprocess.Popen(
            [sys.executable, "-c", TRAIN_CHILD, str(self.directory), *TRAIN_OVERRIDES],
            stdout=self._log.open("w"),
            stderr=subprocess.STDOUT,
            env=env,
        )

    def wait(self, timeout=600):
        """(config.yaml, model_final.weights.h5) of the trained model, once it is there."""
        if self._process is not None:
            returncode = self._process.wait(timeout=timeout)
            assert returncode == 0, f"training the tiny model failed:\n{self._log.read_text()[-3000:]}"
            self._process = None
            self._done.touch()
        deadline = time.monotonic() + timeout
        while not self._done.is_file():  # another test process is training it
            assert time.monotonic() < deadline, f"the tiny model was not trained in {self.directory} in time"
            time.sleep(1)
        return self.config, self.weights

    def stop(self):
        """End the child if it still runs (a test failed before waiting for it)."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()

    def test_config(self, *overrides):
        """The trained model's config with the tests' TEST settings and KEY VALUE `overrides`."""
        return load_config(self.wait()[0], [*TINY_TEST, *overrides])


def shapes_val_images(directory, count):
    """{"shapes0": path, ...}: `count` shapes val images (192 x 192 JPEGs, a seed training did not use)."""
    json_path = shapes.generate(directory, count, seed=1, split_name="val")
    image_dir = shapes.split_paths(directory, "val")[1]
    assert pathlib.Path(json_path).is_file()
    return {f"shapes{i}": str(path) for i, path in enumerate(sorted(pathlib.Path(image_dir).glob("*.jpg")))}


def assert_same_detections(served, expected):
    """Same detections as matched sets: class, boxes within 0.5 px, scores within 1e-4, masks
    IoU >= 0.99, keypoints within 0.5 px (order may differ only between near-equal scores)."""
    n = len(expected["scores"])
    assert len(served["scores"]) == n, f"{len(served['scores'])} served detections, {n} from the Predictor"
    assert sorted(served) == sorted(expected)
    unmatched = list(range(n))
    for i in range(n):
        match = [
            j
            for j in unmatched
            if served["classes"][i] == expected["classes"][j]
            and np.abs(served["boxes"][i] - expected["boxes"][j]).max() <= 0.5
            and abs(served["scores"][i] - expected["scores"][j]) <= 1e-4
        ]
        assert match, f"served detection {i} ({served['classes'][i]}, {served['scores'][i]}) has no match"
        j = match[0]
        unmatched.remove(j)
        if "masks" in expected:
            a, b = served["masks"][i], expected["masks"][j]
            assert a.shape == b.shape and a.dtype == b.dtype == bool
            assert (a & b).sum() >= 0.99 * (a | b).sum()  # IoU >= 0.99 (two empty masks agree)
        if "keypoints" in expected:
            np.testing.assert_allclose(served["keypoints"][i][:, :2], expected["keypoints"][j][:, :2], atol=0.5)
            np.testing.assert_allclose(served["keypoints"][i][:, 2], expected["keypoints"][j][:, 2], atol=1e-3)
            np.testing.assert_allclose(served["keypoint_probs"][i], expected["keypoint_probs"][j], atol=1e-4)
