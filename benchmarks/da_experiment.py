"""Does domain-adaptive training help on the foggy shapes target? Five arms, several seeds, one table.

The DA fork adapts a detector whose backbone starts from ImageNet weights; from scratch, the domain losses
pull on features that do not exist yet. So, per seed, the tiny shapes Faster R-CNN
(configs/shapes_tiny_da_faster.yaml) first trains source-only (`pretrain`: --pretrain-iterations on
`shapes_train`, one image per iteration), and every arm then continues from those weights for --iterations
with the config's schedule restarted (warm-up, decays at 75% and 90%), on the same source image per
iteration; the arms differ in what else each iteration holds and which domain losses train:
- source-only: MODEL.DOMAIN_ADAPTATION_ON False, TRAIN.IMS_PER_BATCH 1;
- zero-weights: DA on (1 source + 1 unlabelled `shapes_target_train` image per iteration), every
  DA_*_LOSS_WEIGHT 0: the control for the target image sharing the batch's proposal top-N;
- image: DA_IMG_LOSS_WEIGHT only; instance: DA_INS_LOSS_WEIGHT only;
- full: image + instance + consistency, the config's DA settings (image-level classifiers on res2 and res3,
  TFDET.DA_IMG_FEATURES);
- no-reversal (not run by default): full with both GRL weights 0: the classifiers learn, the features are
  not pushed back; its accuracies against full's show the reversal at work.
Each model (the pretrained one too) is evaluated (COCO bbox AP, AP50, pycocotools) on the labelled foggy
and plain test splits `shapes_target_test` and `shapes_test` (1024 images each) and on the 64-image val splits
`shapes_target_val` and `shapes_val`; a finished run lacking an evaluation set gets it when run again. The
discriminators' accuracies (`da_img_acc`, `da_ins_acc` in the run's metrics.json) are summarised over training:
their mean over the first, middle and last fifth of the logged records (0.5 = chance).

Each run leaves `<out>/<arm>_<seed>/result.json`; a run whose result exists is not trained again, so an
interrupted experiment resumes, and several processes with other --seeds can share one --out (`--table`
prints the table of whatever is there).

    python benchmarks/da_experiment.py --out outputs/da_experiment [--pretrain-iterations 1000]
        [--iterations 2000] [--seeds 0,1,2] [--arms source-only,zero-weights,image,instance,full] [--table]
    (--arms no-reversal: the diagnostic arm)
"""

if __name__ == "__main__":  # before TensorFlow is imported: its native log records stay off the terminal
    from tfdet.console import quiet_native_logs

    quiet_native_logs()

import argparse
import contextlib
import io
import json
import pathlib
import statistics
import time

from tfdet.config import load_config
from tfdet.console import add_verbose_flag
from tfdet.data.catalog import get_dataset
from tfdet.engine.trainer import Trainer
from tfdet.evaluate import predict_dataset
from tfdet.evaluation import evaluate_results, load_coco

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "shapes_tiny_da_faster.yaml"
_ZERO = {f"MODEL.DA_HEADS.DA_{k}_LOSS_WEIGHT": "0.0" for k in ("IMG", "INS", "CST")}
PRETRAIN = "pretrain"
SOURCE_ONLY = {"MODEL.DOMAIN_ADAPTATION_ON": "False", "TRAIN.IMS_PER_BATCH": "1"}
ARMS = {
    "source-only": SOURCE_ONLY,
    "zero-weights": _ZERO,
    "image": {**_ZERO, "MODEL.DA_HEADS.DA_IMG_LOSS_WEIGHT": "1.0"},
    "instance": {**_ZERO, "MODEL.DA_HEADS.DA_INS_LOSS_WEIGHT": "1.0"},
    "full": {},
    "no-reversal": {"MODEL.DA_HEADS.DA_IMG_GRL_WEIGHT": "0.0", "MODEL.DA_HEADS.DA_INS_GRL_WEIGHT": "0.0"},
}
DEFAULT_ARMS = ("source-only", "zero-weights", "image", "instance", "full")
# The 1024-image test splits first: on the 64-image val splits, evaluation noise alone moves AP by a few points.
EVALUATION_SETS = ("shapes_target_test", "shapes_test", "shapes_target_val", "shapes_val")
METRICS = [f"{name} {m}" for name in EVALUATION_SETS for m in ("AP", "AP50")]
ACCURACIES = ("da_img_acc", "da_ins_acc")


def schedule(iterations):
    """The config's schedule (warm-up, decays at 75% and 90%) scaled to `iterations`."""
    return {
        "SOLVER.MAX_ITER": str(iterations),
        "SOLVER.STEPS": str([0, int(0.75 * iterations), int(0.9 * iterations)]),
        "SOLVER.WARM_UP_ITERS": str(min(100, iterations // 10)),
        "TRAIN.SNAPSHOT_ITERS": str(10**9),
    }


def bbox_metrics(cfg, weights, dataset_name):
    """(AP, AP50) of the model on a catalogued dataset."""
    spec = get_dataset(dataset_name)
    coco = load_coco(spec.annotation_file)
    results, unreadable = predict_dataset(cfg, weights, coco, spec.image_dir)
    if unreadable:
        raise RuntimeError(f"{len(unreadable)} unreadable images in {dataset_name}")
    with contextlib.redirect_stdout(io.StringIO()):  # COCOeval's summary table
        bbox = evaluate_results(coco, results, ["bbox"])["bbox"]
    return bbox["AP"], bbox["AP50"]


def accuracy_curve(metrics_file, name):
    """Mean of `name` over the first, middle and last fifth of the logged records (None if never logged)."""
    values = [r[name] for r in map(json.loads, metrics_file.read_text().splitlines()) if name in r]
    if not values:
        return None
    fifth = max(1, len(values) // 5)
    middle = len(values) // 2
    parts = (values[:fifth], values[middle - fifth // 2:middle - fifth // 2 + fifth], values[-fifth:])
    return [statistics.mean(part) for part in parts]


def run_config(arm, seed, iterations, run_dir, overrides):
    """The config of one run: the arm's settings, the scaled schedule, the overrides, the seed."""
    settings = SOURCE_ONLY if arm == PRETRAIN else ARMS[arm]
    options = {**settings, **schedule(iterations), **overrides, "RNG_SEED": str(seed), "OUTPUT_DIR": str(run_dir)}
    return load_config(CONFIG, [item for pair in options.items() for item in pair])


def add_missing_metrics(row, cfg):
    """Evaluates the row's weights on every evaluation set the row has no AP for yet (True if any)."""
    missing = [name for name in EVALUATION_SETS if f"{name} AP" not in row]
    for name in missing:
        row[f"{name} AP"], row[f"{name} AP50"] = bbox_metrics(cfg, row["weights"], name)
    return bool(missing)


def train_and_evaluate(arm, seed, iterations, run_dir, overrides):
    """{metric: value} of one run: training seconds, AP and AP50 on each evaluation set, accuracy curves,
    final weights."""
    cfg = run_config(arm, seed, iterations, run_dir, overrides)
    start = time.perf_counter()
    trainer = Trainer(cfg, progress=False)
    trainer.initialize()
    result = trainer.train()
    row = {"arm": arm, "seed": seed, "iterations": iterations, "overrides": overrides,
           "train_s": time.perf_counter() - start, "weights": result.final_weights}
    add_missing_metrics(row, cfg)
    for name in ACCURACIES:
        row[name] = accuracy_curve(run_dir / "metrics.json", name)
    return row


def _mean_std(values):
    if not values:
        return "-"
    if len(values) == 1:
        return f"{100 * values[0]:.1f}"
    return f"{100 * statistics.mean(values):.1f} ± {100 * statistics.stdev(values):.1f}"


def _curve(row, name):
    return "/".join(f"{v:.2f}" for v in row[name]) if row.get(name) else "-"


def print_tables(out):
    """Per-run rows and mean ± std per arm of every result.json under `out`."""
    order = {arm: index for index, arm in enumerate((PRETRAIN, *ARMS))}
    rows = [json.loads(p.read_text()) for p in out.glob("*/result.json")]
    rows.sort(key=lambda row: (order[row["arm"]], row["seed"]))
    print("| arm | seed | " + " | ".join(METRICS) + " | da_img_acc | da_ins_acc | train s |")
    print("|---|---|" + "---|" * (len(METRICS) + 3))
    for row in rows:
        cells = " | ".join(f"{100 * row[m]:.1f}" if m in row else "-" for m in METRICS)
        curves = " | ".join(_curve(row, name) for name in ACCURACIES)
        print(f"| {row['arm']} | {row['seed']} | {cells} | {curves} | {row['train_s']:.0f} |")
    print("\nmean ± standard deviation over seeds (AP in %; accuracies: first/middle/last fifth of training):")
    print("| arm | runs | " + " | ".join(METRICS) + " |")
    print("|---|---|" + "---|" * len(METRICS))
    for arm in (PRETRAIN, *ARMS):
        arm_rows = [r for r in rows if r["arm"] == arm]
        if arm_rows:
            cells = " | ".join(_mean_std([r[m] for r in arm_rows if m in r]) for m in METRICS)
            print(f"| {arm} | {len(arm_rows)} | {cells} |")


def run(out, arm, seed, iterations, overrides):
    """The result of one run, trained and evaluated unless `<out>/<arm>_<seed>/result.json` exists."""
    run_dir = out / f"{arm}_{seed}"
    if (run_dir / "result.json").exists():
        row = json.loads((run_dir / "result.json").read_text())
        if (row["iterations"], row["overrides"]) != (iterations, overrides):
            raise SystemExit(f"error: {run_dir} was run with {row['iterations']} iterations and overrides "
                             f"{row['overrides']}, not {iterations} and {overrides}: use another --out")
        if add_missing_metrics(row, run_config(arm, seed, iterations, run_dir, overrides)):  # a newer evaluation set
            (run_dir / "result.json").write_text(json.dumps(row, indent=1))
        return row
    print(f"{arm} seed {seed}: training {iterations} iterations ...", flush=True)
    row = train_and_evaluate(arm, seed, iterations, run_dir, overrides)
    (run_dir / "result.json").write_text(json.dumps(row, indent=1))
    cells = ", ".join(f"{m} {100 * row[m]:.1f}" for m in METRICS)
    print(f"{arm} seed {seed}: {cells}; da_img_acc {_curve(row, 'da_img_acc')}, "
          f"da_ins_acc {_curve(row, 'da_ins_acc')}; {row['train_s']:.0f} s", flush=True)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder of the runs (reused: finished runs are kept)")
    parser.add_argument("--pretrain-iterations", type=int, default=1000, help="source-only iterations before the arms")
    parser.add_argument("--iterations", type=int, default=2000, help="training iterations of every arm")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated RNG_SEEDs")
    parser.add_argument("--arms", default=",".join(DEFAULT_ARMS), help=f"comma-separated arms of: {', '.join(ARMS)}")
    parser.add_argument("--opts", nargs="*", default=[], help="config overrides of every arm (KEY VALUE ...)")
    parser.add_argument("--table", action="store_true", help="only print the table of the finished runs")
    add_verbose_flag(parser)
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    if not args.table:
        arms = args.arms.split(",")
        unknown = [a for a in arms if a not in ARMS]
        if unknown:
            parser.error(f"unknown arms {unknown}; known: {list(ARMS)}")
        if len(args.opts) % 2:
            parser.error("--opts takes KEY VALUE pairs")
        overrides = dict(zip(args.opts[::2], args.opts[1::2]))
        for seed in (int(s) for s in args.seeds.split(",")):
            pretrained = run(out, PRETRAIN, seed, args.pretrain_iterations, overrides)["weights"]
            for arm in arms:
                run(out, arm, seed, args.iterations, {**overrides, "TRAIN.WEIGHTS": pretrained})
    print_tables(out)


if __name__ == "__main__":
    main()
