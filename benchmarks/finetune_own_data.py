"""Fine-tuning a shapes-trained model on your own COCO-format data vs training from scratch, at equal iterations.

The source: the tiny Mask R-CNN of configs/shapes_tiny_mask_keypoint.yaml with MODEL.KEYPOINTS_ON False (so
the two arms' models differ from it only in the class-specific layers), trained from scratch on `shapes_train`
for --source-iterations (RNG_SEED 0) and evaluated on `shapes_val`. The target: the own-objects dataset
(benchmarks/own_objects_dataset.py: stars, rings, crosses, hearts, triangles on other backgrounds; json ids
non-contiguous and out of order, images in sub-folders), given to tfdet as `coco:ANNOTATIONS.json:IMAGE_DIR`
dataset names, MODEL.NUM_CLASSES 6. Two arms, the same config, schedule and seeds:
- scratch: the builders' initialisation (RNG_SEED);
- finetune: TRAIN.WEIGHTS = the source model; its class-specific layers (cls_score, bbox_pred,
  mask_fcn_logits) change shape (4 -> 6 classes) and start as Detectron initialises them (the rows of
  "triangle", a name both datasets have, are copied), everything else is loaded.
Each arm trains --iterations (the config's LR, warm-up min(100, 10%), decays x0.1 at 75% and 90%),
TRAIN.IMS_PER_BATCH 2, once per seed, and is evaluated on the val split with tfdet's evaluation
(`tfdet.evaluate.predict_dataset`, pycocotools COCOeval): box AP, box AP50, mask AP, mask AP50, per-class box AP.

Everything lives under --out: data/ (the dataset), source/ (the source run, reused when its final weights
are there), <arm>_<seed>/ (the runs) and results.json (one row per run: a row already there is not run
again, so an interrupted benchmark resumes; `--table` prints the table of what is there).

    python benchmarks/finetune_own_data.py --out /tmp/finetune_own_data [--source-iterations 1500]
        [--iterations 800] [--seeds 0,1,2] [--arms scratch,finetune] [--train-images 400] [--val-images 100]
        [--table]
"""

if __name__ == "__main__":  # before TensorFlow is imported: its native log records stay off the terminal
    from tfdet.console import quiet_native_logs

    quiet_native_logs()

import argparse
import contextlib
import io
import json
import logging
import os
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # own_objects_dataset, run as a script

from own_objects_dataset import CATEGORY_IDS, ensure_dataset  # noqa: E402

from tfdet.config import load_config  # noqa: E402
from tfdet.console import add_verbose_flag  # noqa: E402
from tfdet.data.catalog import get_dataset  # noqa: E402
from tfdet.engine.trainer import Trainer  # noqa: E402
from tfdet.evaluate import predict_dataset  # noqa: E402
from tfdet.evaluation import evaluate_results, load_coco  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "shapes_tiny_mask_keypoint.yaml"
ARMS = ("scratch", "finetune")
SOURCE_SEED = 0
METRICS = {"box AP": ("bbox", "AP"), "box AP50": ("bbox", "AP50"), "mask AP": ("segm", "AP"),
           "mask AP50": ("segm", "AP50")}
RESULTS = "results.json"


def schedule(iterations):
    """The config's LR with warm-up min(100, 10%) and x0.1 decays at 75% and 90% of `iterations`."""
    return {
        "SOLVER.MAX_ITER": iterations,
        "SOLVER.STEPS": [0, int(0.75 * iterations), int(0.9 * iterations)],
        "SOLVER.WARM_UP_ITERS": min(100, iterations // 10),
        "TRAIN.SNAPSHOT_ITERS": 10**9,
    }


def coco_name(annotation_file, image_dir):
    """The `coco:ANNOTATIONS.json:IMAGE_DIR` dataset name of a COCO-format dataset."""
    return f"coco:{annotation_file}:{image_dir}"


def run_config(run_dir, iterations, seed, train_set, test_set, num_classes, weights=""):
    """The config of one run: the tiny Mask R-CNN (no keypoints) on the named datasets."""
    options = {
        "MODEL.KEYPOINTS_ON": False,
        "MODEL.NUM_CLASSES": num_classes,
        "TRAIN.DATASETS": (train_set,),
        "TEST.DATASETS": (test_set,),
        "TRAIN.WEIGHTS": weights,
        "RNG_SEED": seed,
        "OUTPUT_DIR": str(run_dir),
        **schedule(iterations),
    }
    return load_config(CONFIG, options)


def evaluate(cfg, weights, dataset_name):
    """{metric: value} of the model on a dataset name: METRICS, then bbox AP per class ("box AP-<name>")."""
    spec = get_dataset(dataset_name)
    coco = load_coco(spec.annotation_file)
    results, unreadable = predict_dataset(cfg, weights, coco, spec.image_dir)
    if unreadable:
        raise RuntimeError(f"{len(unreadable)} unreadable images in {dataset_name}")
    with contextlib.redirect_stdout(io.StringIO()):  # COCOeval's summary tables
        metrics = evaluate_results(coco, results, ["bbox", "segm"])
    row = {name: metrics[iou_type][stat] for name, (iou_type, stat) in METRICS.items()}
    row.update({f"box {k}": v for k, v in metrics["bbox"].items() if k.startswith("AP-")})
    return row


def train(cfg):
    """(final weights, training seconds) of one run, trained unless its output folder has the final weights."""
    start = time.perf_counter()
    trainer = Trainer(cfg, progress=False)
    trainer.initialize()
    return trainer.train().final_weights, time.perf_counter() - start


def source_model(out, iterations):
    """(weights, row) of the shapes-trained source, trained and evaluated on shapes_val unless out/source has them."""
    run_dir = out / "source"
    row_file = run_dir / "source.json"
    if row_file.is_file():
        row = json.loads(row_file.read_text())
        if row["iterations"] != iterations:
            raise SystemExit(f"error: {run_dir} was trained {row['iterations']} iterations, not {iterations}: "
                             "use another --out")
        return row["weights"], row
    cfg = run_config(run_dir, iterations, SOURCE_SEED, "shapes_train", "shapes_val", num_classes=4)
    print(f"source: training {iterations} iterations on shapes_train ...", flush=True)
    weights, train_s = train(cfg)
    start = time.perf_counter()
    row = {"arm": "source", "seed": SOURCE_SEED, "iterations": iterations, "weights": weights, "train_s": train_s,
           **evaluate(cfg, weights, "shapes_val")}
    row["eval_s"] = time.perf_counter() - start
    row_file.write_text(json.dumps(row, indent=1))
    print(f"source on shapes_val: {_cells(row)}; {train_s:.0f} s", flush=True)
    return weights, row


def read_rows(out):
    path = out / RESULTS
    return json.loads(path.read_text()) if path.is_file() else []


def write_rows(out, rows):
    """results.json, replaced whole (temporary file + rename): an interruption leaves the previous one."""
    temporary = out / f".{os.getpid()}.{RESULTS}"
    temporary.write_text(json.dumps(rows, indent=1))
    os.replace(temporary, out / RESULTS)


def run_arm(out, arm, seed, iterations, datasets, source_weights):
    """The row of one arm and seed: trained on the target train split, evaluated on its val split."""
    train_set, test_set = datasets
    weights = source_weights if arm == "finetune" else ""
    cfg = run_config(out / f"{arm}_{seed}", iterations, seed, train_set, test_set, len(CATEGORY_IDS) + 1, weights)
    print(f"{arm} seed {seed}: training {iterations} iterations ...", flush=True)
    final, train_s = train(cfg)
    start = time.perf_counter()
    row = {"arm": arm, "seed": seed, "iterations": iterations, "weights": final, "train_s": train_s,
           **evaluate(cfg, final, test_set)}
    row["eval_s"] = time.perf_counter() - start
    print(f"{arm} seed {seed}: {_cells(row)}; {train_s:.0f} s training, {row['eval_s']:.0f} s evaluation", flush=True)
    return row


def _cells(row):
    return ", ".join(f"{name} {100 * row[name]:.1f}" for name in METRICS)


def _mean_std(values):
    if len(values) == 1:
        return f"{100 * values[0]:.1f}"
    return f"{100 * statistics.mean(values):.1f} ± {100 * statistics.stdev(values):.1f}"


def print_table(out):
    """Per-run rows and mean ± std per arm (AP in %), with the source model's own shapes_val row."""
    rows = sorted(read_rows(out), key=lambda r: (ARMS.index(r["arm"]), r["seed"]))
    source_file = out / "source" / "source.json"
    sources = [json.loads(source_file.read_text())] if source_file.is_file() else []
    class_columns = [f"box AP-{name}" for name in sorted(CATEGORY_IDS)]
    print("| arm | seed | iterations | " + " | ".join([*METRICS, *class_columns]) + " | train s | eval s |")
    print("|---|---|---|" + "---|" * (len(METRICS) + len(class_columns) + 2))
    for row in sources + rows:
        cells = " | ".join(f"{100 * row[m]:.1f}" if m in row else "-" for m in [*METRICS, *class_columns])
        print(f"| {row['arm']} | {row['seed']} | {row['iterations']} | {cells} | {row['train_s']:.0f} | "
              f"{row['eval_s']:.0f} |")
    if sources:
        print("(source: the shapes-trained model on shapes_val, its own classes square, circle, triangle)")
    print("\nmean ± standard deviation over seeds (AP in %):")
    print("| arm | runs | " + " | ".join(METRICS) + " |")
    print("|---|---|" + "---|" * len(METRICS))
    for arm in ARMS:
        arm_rows = [r for r in rows if r["arm"] == arm]
        if arm_rows:
            cells = " | ".join(_mean_std([r[m] for r in arm_rows]) for m in METRICS)
            print(f"| {arm} | {len(arm_rows)} | {cells} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder of the dataset, the runs and results.json (reused)")
    parser.add_argument("--source-iterations", type=int, default=1500, help="shapes_train iterations of the source")
    parser.add_argument("--iterations", type=int, default=800, help="training iterations of every arm")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated RNG_SEEDs of the arms")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated arms of: {', '.join(ARMS)}")
    parser.add_argument("--train-images", type=int, default=400, help="images of the own-objects train split")
    parser.add_argument("--val-images", type=int, default=100, help="images of the own-objects val split")
    parser.add_argument("--data-seed", type=int, default=0, help="seed of the own-objects dataset")
    parser.add_argument("--table", action="store_true", help="only print the table of the finished runs")
    add_verbose_flag(parser)
    args = parser.parse_args()
    # the trainer's lines: the blobs fine-tuning re-initialises or copies, the LR changes
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    out = pathlib.Path(args.out)
    if not args.table:
        arms = args.arms.split(",")
        unknown = [a for a in arms if a not in ARMS]
        if unknown:
            parser.error(f"unknown arms {unknown}; known: {', '.join(ARMS)}")
        seeds = [int(s) for s in args.seeds.split(",")]
        paths = ensure_dataset(out / "data", args.train_images, args.val_images, args.data_seed)
        datasets = tuple(coco_name(*paths[split]) for split in ("train", "val"))
        source_weights, _ = source_model(out, args.source_iterations)
        for arm in arms:
            for seed in seeds:
                rows = read_rows(out)
                done = [r for r in rows if (r["arm"], r["seed"]) == (arm, seed)]
                if done and done[0]["iterations"] != args.iterations:
                    raise SystemExit(f"error: {out / RESULTS} has {arm} seed {seed} at {done[0]['iterations']} "
                                     f"iterations, not {args.iterations}: use another --out")
                if not done:
                    write_rows(out, rows + [run_arm(out, arm, seed, args.iterations, datasets, source_weights)])
    print_table(out)


if __name__ == "__main__":
    main()
