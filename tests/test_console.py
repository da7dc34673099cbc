"""The command lines' quiet terminal (tfdet.console): native writes to stderr are dropped, Python's stay;
ConfigWarnings print as one line on every command line; flags may follow the KEY VALUE overrides."""

import argparse
import os
import subprocess
import sys

from support.child_processes import native_log_records
from support.paths import REPO_ROOT, shared_path
from tfdet.console import parse_args_with_overrides

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


# A child that sets its terminal up as the command lines do, then warns as the config loader and a library do.
WARNING_CHILD = """
import sys, warnings
from tfdet.console import quiet_native_logs
from tfdet.config import ConfigWarning
quiet_native_logs(sys.argv[1:])
warnings.warn("FAST_RCNN.ROI_BOX_HEAD: Detectron renamed 'a' to 'b'; using 'b'", ConfigWarning)
warnings.warn("a library's own warning", UserWarning)
"""


def run_child(*args, env=None, child=CHILD, status=0):
    """stderr of `python -c child args` (or of `python -m args` when `child` is None) from the repository."""
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT), CUDA_VISIBLE_DEVICES="")
    environment.pop("TFDET_VERBOSE", None)
    environment.pop("TF_CPP_MIN_LOG_LEVEL", None)
    environment.update(env or {})
    command = [sys.executable, *(["-m"] if child is None else ["-c", child]), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=environment, cwd=REPO_ROOT)
    assert done.returncode == status, done.stderr[-3000:]
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


def test_config_warnings_are_one_line_whatever_the_verbosity():
    for args in ([], ["--verbose"]):
        lines = run_child(*args, child=WARNING_CHILD).splitlines()
        assert [line for line in lines if "renamed" in line] == [
            "warning: FAST_RCNN.ROI_BOX_HEAD: Detectron renamed 'a' to 'b'; using 'b'"
        ]
        assert not any("ConfigWarning" in line or "warnings.warn(" in line for line in lines), lines
        assert any(line.endswith("UserWarning: a library's own warning") for line in lines), "others as Python's"


def test_export_prints_a_zoo_configs_warning_as_porting_does(tmp_path):
    """Detectron's keypoint YAML names a head function Detectron renamed: the export command line says so in
    the `warning: MESSAGE` line `python -m porting` prints, then stops at the missing weights."""
    config = shared_path("detectron", "configs", "12_2017_baselines", "e2e_keypoint_rcnn_R-50-FPN_1x.yaml")
    missing = tmp_path / "model_final.pkl"
    stderr = run_child("savedmodel.export", "--cfg", str(config), "--weights", str(missing), "--out",
                       str(tmp_path / "serving" / "keypoints" / "1"), child=None, status=1)  # fmt: skip
    assert stderr.splitlines() == [
        "warning: FAST_RCNN.ROI_BOX_HEAD: Detectron renamed 'head_builder.add_roi_2mlp_head' to "
        "'fast_rcnn_heads.add_roi_2mlp_head'; using 'fast_rcnn_heads.add_roi_2mlp_head'",
        f"error: weights file not found: {missing}",
    ]


def overrides_parser():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cfg")
    parser.add_argument("--skip-test", action="store_true")
    parser.add_argument("opts", nargs=argparse.REMAINDER)
    return parser


def test_flags_may_follow_the_overrides_and_values_stay_values():
    parse = overrides_parser()
    args = parse_args_with_overrides(parse, ["--cfg", "a.yaml", "SOLVER.MAX_ITER", "5", "--skip-test", "A", "1"])
    assert (args.cfg, args.skip_test, args.opts) == ("a.yaml", True, ["SOLVER.MAX_ITER", "5", "A", "1"])
    args = parse_args_with_overrides(parse, ["X", "1", "--cfg=b.yaml", "TEST.SCORE_THRESH", "-1e-3", "--cfg", "c"])
    assert (args.cfg, args.skip_test, args.opts) == ("c", False, ["X", "1", "TEST.SCORE_THRESH", "-1e-3"])
    args = parse_args_with_overrides(parse, ["OUTPUT_DIR", "--skip-test"])  # a value, whatever it looks like
    assert (args.skip_test, args.opts) == (False, ["OUTPUT_DIR", "--skip-test"])
    args = parse_args_with_overrides(parse, ["A", "1", "--unknown", "2"])  # not a flag of ours: the loader refuses
    assert args.opts == ["A", "1", "--unknown", "2"]
