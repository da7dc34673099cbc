"""Seconds and peak memory to port full-size Detectron files through `python -m porting detectron`.

For Mask R-CNN R-50-FPN (44.4 M parameters, 81 classes) and Mask R-CNN X-101-64x4d-FPN, a
`model_final.pkl` with random values in Detectron layout (every parameter blob of the model,
plus the stem's zero conv bias and the ImageNet classifier Detectron files keep; `--momentum`
adds `*_momentum` for every parameter, as trained zoo files carry) is written as a protocol-2
pickle by porting's own Detectron writer into a temporary folder. Then, each in a fresh child
process: `porting.read_weight_file` alone (timed inside the child) and the whole CLI port
(wall time and CPU time of the child: Python and TensorFlow start-up, model build, read,
assignment, writing `model.weights.h5`). A child that only imports `porting` gives the start-up
baseline. `write s` is porting's Detectron writer (export-detectron's), for reference. Peak RSS
is each child's own `ru_maxrss` from `os.wait4` (`getrusage(RUSAGE_CHILDREN)` would report the
largest child so far, not this one). Other processes sharing the CPU make these upper bounds.

    python benchmarks/bench_port.py [--momentum] [--keep DIR]
"""

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from porting.detectron_writer import write_detectron_pkl  # noqa: E402
from tfdet.config import load_config  # noqa: E402
from tfdet.modeling import build_model  # noqa: E402
from tfdet.modeling.detectron_names import detectron_inventory  # noqa: E402

CONFIGS = ROOT.parent / "shared" / "detectron" / "configs" / "12_2017_baselines"
MODELS = {
    "Mask R-50-FPN": CONFIGS / "e2e_mask_rcnn_R-50-FPN_1x.yaml",
    "Mask X-101-64x4d-FPN": CONFIGS / "e2e_mask_rcnn_X-101-64x4d-FPN_1x.yaml",
}
READ_ONLY = (
    "import sys, time\n"
    "from porting import read_weight_file\n"
    "start = time.perf_counter()\n"
    "blobs = read_weight_file(sys.argv[1]).blobs\n"
    "print(time.perf_counter() - start, len(blobs))\n"
)
TARGET_SECONDS = 10.0


def load_zoo_config(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Detectron's renamed keys in some zoo YAMLs
        return load_config(path)


def write_model_file(cfg_path, path, momentum, rng):
    """A model_final.pkl of the config's model, random parameters in Caffe2 layout; (parameter blobs, values)."""
    cfg = load_zoo_config(cfg_path)
    shapes = detectron_inventory(build_model(cfg), cfg.MRCNN.ROI_MASK_HEAD)
    blobs = {name: rng.standard_normal(shape, dtype=np.float32) * np.float32(0.01) for name, shape in shapes.items()}
    if momentum:
        blobs.update({f"{name}_momentum": np.zeros(value.shape, np.float32) for name, value in list(blobs.items())})
    blobs.update(conv1_b=np.zeros(64, np.float32), fc1000_w=np.zeros((1000, 2048), np.float32),
                 fc1000_b=np.zeros(1000, np.float32))  # fmt: skip
    write_detectron_pkl(path, blobs, cfg.dump())
    return len(shapes), sum(int(np.prod(s)) for s in shapes.values())


def run_measured(command):
    """(wall seconds, CPU seconds, peak RSS MB, stdout) of one child, its own rusage read with os.wait4."""
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(child.pid, 0)  # reaps the child: Popen.wait() is not called after this
        wall = time.perf_counter() - start
        code = child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if code != 0:
            raise RuntimeError(f"{' '.join(map(str, command))} failed ({code}):\n{err.read()[-2000:]}")
        return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0, out.read()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--momentum", action="store_true", help="add *_momentum blobs as trained zoo files have")
    parser.add_argument("--keep", help="write the files into this folder and keep them")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as scratch:
        folder = pathlib.Path(args.keep or scratch)
        folder.mkdir(parents=True, exist_ok=True)
        _, baseline_cpu, baseline_rss, _ = run_measured([sys.executable, "-c", "import porting"])
        rows = []
        for name, cfg_path in MODELS.items():
            path = folder / f"{name.replace(' ', '_')}.pkl"
            start = time.perf_counter()
            num_blobs, num_values = write_model_file(cfg_path, path, args.momentum, rng)
            write_seconds = time.perf_counter() - start
            _, _, read_rss, read_out = run_measured([sys.executable, "-c", READ_ONLY, str(path)])
            read_seconds = float(read_out.split()[0])
            out = folder / f"{name.replace(' ', '_')}_ported"
            port = [sys.executable, "-m", "porting", "detectron", "--cfg", str(cfg_path), "--weights", str(path),
                    "--out", str(out)]  # fmt: skip
            port_seconds, port_cpu, port_rss, _ = run_measured(port)
            rows.append((name, num_blobs, num_values / 1e6, path.stat().st_size / 2**20, write_seconds, read_seconds,
                         read_rss, port_seconds, port_cpu, port_rss))  # fmt: skip
    print(
        f"start-up baseline (a child importing porting, with TensorFlow): {baseline_cpu:.1f} CPU s, "
        f"peak RSS {baseline_rss:.0f} MB"
    )
    print(f"{'model':22s} {'blobs':>5s} {'M params':>8s} {'file MB':>8s} {'write s':>7s} {'read s':>6s} "
          f"{'read RSS MB':>11s} {'CLI port s':>10s} {'port CPU s':>10s} {'port RSS MB':>11s}")  # fmt: skip
    for name, blobs, millions, size, write_s, read_s, read_rss, port_s, port_cpu, port_rss in rows:
        flag = "" if port_s < TARGET_SECONDS else f"  (over the {TARGET_SECONDS:.0f} s target)"
        print(f"{name:22s} {blobs:5d} {millions:8.2f} {size:8.0f} {write_s:7.1f} {read_s:6.2f} {read_rss:11.0f} "
              f"{port_s:10.1f} {port_cpu:10.1f} {port_rss:11.0f}{flag}")  # fmt: skip


if __name__ == "__main__":
    main()
