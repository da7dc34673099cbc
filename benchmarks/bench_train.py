"""Training speed: seconds per iteration and images per second of `Trainer.train_step`, and of the input
pipeline alone on the same data.

Rows (each: the first step, which traces and optimises the graph, then the mean of the timed steps):
- tiny: configs/shapes_tiny_mask_keypoint.yaml (GN R-50-FPN, 8-wide bottlenecks, 128 px) on shapes;
- shapes: configs/shapes_mask_keypoint_R-50-FPN.yaml (R-50-FPN, 160-224 px) on shapes;
- coco: Detectron's 12_2017_baselines/e2e_mask_rcnn_R-50-FPN_1x.yaml (800 x 1333, 512 RoIs per image)
  on the Detectron demo photos with 10 fake objects each (benchmarks/bench_data_pipeline.py's).
Every row uses the default strategy (one device: the GPU when one is visible, else the CPU) and
TRAIN.IMS_PER_BATCH 2, from the builders' random initialisation (no TRAIN.WEIGHTS download).

    python benchmarks/bench_train.py [--rows tiny,shapes,coco] [--iterations 10] [--coco-iterations 3]
"""

import argparse
import os
import pathlib
import shutil
import tempfile
import time

import numpy as np
import tensorflow as tf
from bench_data_pipeline import photo_dataset, throughput

from tfdet.config import load_config
from tfdet.data import pipeline, shapes
from tfdet.data.roidb import load_coco_roidb
from tfdet.engine.trainer import Trainer

ROOT = pathlib.Path(__file__).resolve().parents[1]
ROWS = {
    "tiny": (ROOT / "configs" / "shapes_tiny_mask_keypoint.yaml", "shapes"),
    "shapes": (ROOT / "configs" / "shapes_mask_keypoint_R-50-FPN.yaml", "shapes"),
    "coco": (ROOT.parent / "shared" / "detectron" / "configs" / "12_2017_baselines" / "e2e_mask_rcnn_R-50-FPN_1x.yaml",
             "photos"),
}


def training_speed(trainer, iterations):
    """(seconds of the first step, mean seconds of the next `iterations` steps)."""
    batches = iter(trainer.distributed_dataset(0))
    start = time.perf_counter()
    trainer.train_step(next(batches))
    first = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(iterations):
        trainer.train_step(next(batches))
    return first, (time.perf_counter() - start) / iterations


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="tiny,shapes,coco", help="comma-separated rows: tiny, shapes, coco")
    parser.add_argument("--iterations", type=int, default=10, help="timed steps of the tiny and shapes rows")
    parser.add_argument("--coco-iterations", type=int, default=3, help="timed steps of the 800 x 1333 row")
    args = parser.parse_args()
    device = "GPU" if tf.config.list_physical_devices("GPU") else f"CPU ({os.cpu_count()} cores, possibly shared)"
    print(f"device: {device}")
    work = pathlib.Path(tempfile.mkdtemp(prefix="bench_train_"))
    try:
        data = {"shapes": (shapes.generate(work, 64, seed=0), work / "train")}
        if "coco" in args.rows:
            (work / "photos").mkdir()
            data["photos"] = (photo_dataset(work / "photos", np.random.default_rng(0)), work / "photos")
        for row in args.rows.split(","):
            config_file, dataset = ROWS[row]
            overrides = {"OUTPUT_DIR": str(work / row), "TRAIN.WEIGHTS": "", "TRAIN.IMS_PER_BATCH": 2, "NUM_GPUS": 1}
            cfg = load_config(config_file, overrides)
            keypoints = bool(cfg.MODEL.KEYPOINTS_ON)
            roidb = load_coco_roidb(*data[dataset], with_masks=bool(cfg.MODEL.MASK_ON), keypoints_required=keypoints)
            pipeline_rate, _ = throughput(pipeline.build_train_dataset(cfg, roidb), 20, cfg.TRAIN.IMS_PER_BATCH)
            trainer = Trainer(cfg, roidb=roidb, progress=False)
            first, step = training_speed(trainer, args.coco_iterations if row == "coco" else args.iterations)
            images = trainer.global_batch
            print(f"{row:<7} first step {first:7.1f} s | {step:7.3f} s/iteration | {images / step:7.2f} images/s "
                  f"| input pipeline alone {pipeline_rate:7.1f} images/s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
