"""How training runs on CPUs alone: one inter-op thread for a one-replica Trainer (chosen before TensorFlow's
runtime starts, a user's own choice kept), and an input pipeline that loads one image at a time."""

import os
import subprocess
import sys

from support.paths import REPO_ROOT, TESTS_DIR
from tfdet.data.pipeline import input_parallelism

CHILD = """
import pathlib, sys
sys.path.insert(0, {tests!r})
import tensorflow as tf
from tfdet.graph_options import one_op_at_a_time_on_cpu
case, work = sys.argv[1], pathlib.Path(sys.argv[2])
if case == "trainer":
    from support.training_fixtures import SMALL_GRAPH, shapes_roidb, tiny_cfg
    from tfdet.engine.trainer import Trainer
    Trainer(tiny_cfg(*SMALL_GRAPH, "OUTPUT_DIR", str(work / "out")), roidb=shapes_roidb(work, 2), progress=False)
    print(tf.config.threading.get_inter_op_parallelism_threads())
else:
    if case == "user":
        tf.config.threading.set_inter_op_parallelism_threads(3)
    if case == "started":
        tf.constant(1.0) + 1.0  # the runtime starts with its default thread pools
    print(one_op_at_a_time_on_cpu(), tf.config.threading.get_inter_op_parallelism_threads())
"""


def test_one_replica_training_on_cpus_runs_one_op_at_a_time_unless_chosen_otherwise(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), CUDA_VISIBLE_DEVICES="")
    code = CHILD.format(tests=str(TESTS_DIR))
    cases = ("trainer", "fresh", "user", "started")
    children = {}
    for case in cases:
        (tmp_path / case).mkdir()
        children[case] = subprocess.Popen([sys.executable, "-c", code, case, str(tmp_path / case)], cwd=REPO_ROOT,
                                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    printed = {}
    for case, child in children.items():
        stdout, stderr = child.communicate(timeout=300)
        assert child.returncode == 0, stderr[-3000:]
        printed[case] = stdout.split("\n")[-2]
    assert printed == {
        "trainer": "1",  # the Trainer chose it before its strategy started the runtime
        "fresh": "True 1",
        "user": "False 3",  # the user's value is kept
        "started": "False 0",  # the runtime's pools are fixed once it started: TF's default (0) stays
    }


def test_cpu_pipeline_loads_one_image_at_a_time_one_batch_ahead():
    assert input_parallelism() == (1, 1)  # no GPU is visible to the tests
