"""The command lines' quiet terminal (tfdet.console): native writes to stderr are dropped, Python's stay."""

import os
import subprocess
import sys

from child_processes import native_log_records
from conftest import REPO_ROOT

# A child that quiets (or not), runs TensorFlow on a graph whose Grappler pass logs (CropAndResize with an
# unknown box count), writes one line as native code does (to descriptor 2) and one through Python's stderr.
CHILD = """
import os, sys
from tfdet.console import quiet_native_logs
quiet_native_logs(sys.argv[1:])
if "--with-tensorflow" in sys.argv:
    import tensorflow as tf
    crop = tf.function(lambda x, b: tf.image.crop_and_resize(x, b, tf.zeros(tf.shape(b)[:1], tf.int32), [7, 7]),
                       input_signature=[tf.TensorSpec([None, None, None, 4]), tf.TensorSpec([None, 4])])
    crop(tf.ones([1, 9, 9, 4]), tf.constant([[0.0, 0.0, 0.5, 0.5]]))
os.write(2, b"native-marker\\n")
print("python-marker", file=sys.stderr)
"""


def run_child(*args, env=None):
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT), CUDA_VISIBLE_DEVICES="")
    environment.pop("TFDET_VERBOSE", None)
    environment.pop("TF_CPP_MIN_LOG_LEVEL", None)
    environment.update(env or {})
    done = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, timeout=120,
                          env=environment)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def test_quiet_by_default_with_tensorflow_running_a_graph():
    stderr = run_child("--with-tensorflow")
    assert "python-marker" in stderr and "native-marker" not in stderr
    assert native_log_records(stderr) == []


def test_verbose_flag_and_environment_variable_keep_everything():
    for args, env in ((["--verbose"], {}), ([], {"TFDET_VERBOSE": "1"})):
        stderr = run_child(*args, env=env)
        assert "python-marker" in stderr and "native-marker" in stderr


def test_native_records_are_recognised():
    text = (
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
        "W0000 00:00:1795614107.038791    5823 op_level_cost_estimator.cc:699] Error in PredictCost()\n"
        "json_stats: {\"iter\": 0}\n"
    )
    assert len(native_log_records(text)) == 2
