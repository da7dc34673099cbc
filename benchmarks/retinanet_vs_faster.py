"""RetinaNet vs Faster R-CNN on shapes: the same GroupNorm R-50-FPN body, images, iterations and schedule.

The two models (issue 33):
- faster: configs/shapes_tiny_faster.yaml (the box-only twin of configs/shapes_tiny_mask_keypoint.yaml,
  BASE_LR 0.02);
- retinanet: configs/shapes_retinanet.yaml (BASE_LR as that config says; Detectron's RetinaNet zoo runs at
  half its R-CNN zoo LR).
Both from scratch, 2 images per iteration, 128 px, the configs' schedule scaled to --iters (warm-up 100,
decays at 11/15 and 27/30 of the run, as both configs' own schedules of 1500 and 4500 iterations). Every
--eval-every iterations the training checkpoint is exported to an inference model and evaluated (COCO box AP
and AP50, pycocotools) on --eval-sets (default `shapes_val`, 64 images); the loss curves (metrics.json, one
record per 20 iterations) are summarised over five equal windows: RetinaNet's focal loss, box loss and fg
anchors per image (`retnet_fg_num / 2 - 1`: Detectron's normaliser adds 1 per image), Faster R-CNN's RPN and
Fast R-CNN losses.

A variant is a name and config overrides (`--name retinanet_lr0.02 --opts SOLVER.BASE_LR 0.02`); each run
leaves `<out>/<name>_s<seed>/result.json`, a finished run is not trained again (an interrupted one resumes
from its newest checkpoint), and `--table` prints the table of every run under --out.

    python benchmarks/retinanet_vs_faster.py --out outputs/retinanet_vs_faster --models faster,retinanet \
        [--iters 1500] [--seeds 0,1,2] [--eval-every 300] [--name NAME --opts KEY VALUE ...] [--table]
"""

if __name__ == "__main__":  # before TensorFlow is imported: its native log records stay off the terminal
    from tfdet.console import quiet_native_logs

    quiet_native_logs()

import argparse
import contextlib
import io
import json
import pathlib
import re
import statistics
import time

from tfdet.config import load_config
from tfdet.console import add_verbose_flag
from tfdet.data.catalog import get_dataset
from tfdet.evaluation import evaluate_results, load_coco

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = {
    "faster": ROOT / "configs" / "shapes_tiny_faster.yaml",
    "retinanet": ROOT / "configs" / "shapes_retinanet.yaml",
}
CURVES = {
    "faster": ("loss_rpn_cls", "loss_rpn_bbox", "loss_cls", "loss_bbox", "accuracy_cls"),
    "retinanet": ("loss_retnet_cls", "loss_retnet_bbox", "fg_per_image"),
}
WINDOWS = 5


def schedule(iterations, eval_every):
    """The configs' schedule (decays at 11/15 and 27/30 of the run, warm-up 100) scaled to `iterations`."""
    return {
        "SOLVER.MAX_ITER": str(iterations),
        "SOLVER.STEPS": str([0, round(iterations * 11 / 15), round(iterations * 27 / 30)]),
        "SOLVER.WARM_UP_ITERS": str(min(100, iterations // 10)),
        "TRAIN.SNAPSHOT_ITERS": str(eval_every),
    }


def run_config(model, seed, iterations, eval_every, run_dir, overrides):
    options = {**schedule(iterations, eval_every), **overrides, "RNG_SEED": str(seed), "OUTPUT_DIR": str(run_dir)}
    return load_config(CONFIGS[model], [item for pair in options.items() for item in pair])


def bbox_metrics(cfg, weights, dataset_name):
    """(AP, AP50) of the weights on a catalogued dataset."""
    from tfdet.evaluate import predict_dataset

    spec = get_dataset(dataset_name)
    coco = load_coco(spec.annotation_file)
    results, unreadable = predict_dataset(cfg, weights, coco, spec.image_dir, batch_size=8)
    if unreadable:
        raise RuntimeError(f"{len(unreadable)} unreadable images in {dataset_name}")
    if not results:
        return 0.0, 0.0
    with contextlib.redirect_stdout(io.StringIO()):  # COCOeval's summary table
        bbox = evaluate_results(coco, results, ["bbox"])["bbox"]
    return bbox["AP"], bbox["AP50"]


def checkpoints(run_dir):
    """{iteration: checkpoint prefix} of the run's training checkpoints."""
    found = {}
    for index in run_dir.glob("model_iter-*.index"):
        match = re.fullmatch(r"model_iter-(\d+)\.index", index.name)
        if match:
            found[int(match.group(1))] = str(index.with_suffix(""))
    return found


def export_checkpoints(trainer, run_dir):
    """{iteration: inference weights} of every checkpoint (exported once to `<run>/eval_<N>/`)."""
    from tfdet.data.model_labels import roidb_categories
    from tfdet.engine.weights import export_final_weights

    exported = {}
    for iteration, prefix in sorted(checkpoints(run_dir).items()):
        eval_dir = run_dir / f"eval_{iteration}"
        weights = eval_dir / "model_final.weights.h5"
        if not weights.exists():
            eval_dir.mkdir(exist_ok=True)
            trainer.checkpointer.checkpoint.restore(prefix).expect_partial()
            export_final_weights(trainer.cfg, trainer.model, str(eval_dir), roidb_categories(trainer.roidb))
        exported[iteration] = str(weights)
    return exported


def curve_windows(metrics_file, model, windows=WINDOWS):
    """{name: [mean over each of `windows` equal parts of the logged records]} of the model's curves."""
    records = [json.loads(line) for line in metrics_file.read_text().splitlines()]
    for record in records:
        if "retnet_fg_num" in record:
            record["fg_per_image"] = record["retnet_fg_num"] / 2.0 - 1.0  # IMS_PER_BATCH 2, + 1 per image
    out = {}
    for name in CURVES[model]:
        values = [r[name] for r in records if name in r]
        if values:
            size = max(1, len(values) // windows)
            out[name] = [statistics.mean(values[i * size:(i + 1) * size] or values[-size:]) for i in range(windows)]
    return out


def active_units(cfg, weights, dataset_name="shapes_val", num_images=8):
    """{tower layer: fraction of its ReLU outputs above 0} of a RetinaNet on the first images of a dataset, over
    every level: a tower whose units all died passes no image information to its prediction conv."""
    import cv2
    import keras
    import numpy as np

    from tfdet.imaging.image_io import read_image
    from tfdet.modeling import build_model

    spec = get_dataset(dataset_name)
    coco = load_coco(spec.annotation_file)
    model = build_model(cfg)
    model.load_weights(weights)
    tower_relu = r"retnet_(cls|bbox)_conv_n\d+_fpn\d+_relu"
    names = [layer.name for layer in model.layers if re.fullmatch(tower_relu, layer.name)]
    probe = keras.Model(model.inputs, {name: model.get_layer(name).output for name in names})
    means = np.array(cfg.PIXEL_MEANS, np.float32).reshape(1, 1, 3)
    active = {}
    for image_id in sorted(coco.getImgIds())[:num_images]:
        image = read_image(pathlib.Path(spec.image_dir) / coco.imgs[image_id]["file_name"]).astype(np.float32)
        scale = cfg.TEST.SCALE / min(image.shape[:2])
        image = cv2.resize(image, None, fx=scale, fy=scale, interpolation=cv2.INTER_LINEAR) - means
        info = np.array([[image.shape[0] / scale, image.shape[1] / scale, scale]], np.float32)
        for name, value in probe({"images": image[None], "image_info": info}).items():
            layer = re.sub(r"_fpn\d+_relu$", "", name)
            active.setdefault(layer, []).append(float(np.mean(np.asarray(value) > 0)))
    return {layer: float(np.mean(values)) for layer, values in active.items()}


def train_and_evaluate(model, seed, iterations, eval_every, run_dir, overrides, eval_sets):
    from tfdet.engine.trainer import Trainer

    cfg = run_config(model, seed, iterations, eval_every, run_dir, overrides)
    start = time.perf_counter()
    trainer = Trainer(cfg, progress=False)
    trainer.initialize()
    trainer.train()
    train_s = time.perf_counter() - start
    row = {"model": model, "seed": seed, "iterations": iterations, "overrides": overrides, "train_s": train_s,
           "ap": {}}
    for iteration, weights in export_checkpoints(trainer, run_dir).items():
        for name in eval_sets:
            ap, ap50 = bbox_metrics(cfg, weights, name)
            row["ap"].setdefault(str(iteration), {})[name] = [ap, ap50]
            print(f"  {run_dir.name} iter {iteration} {name}: AP {100 * ap:.1f} AP50 {100 * ap50:.1f}", flush=True)
        if model == "retinanet":
            row.setdefault("active", {})[str(iteration)] = active_units(cfg, weights)
    row["curves"] = curve_windows(run_dir / "metrics.json", model)
    return row


def _pct(value):
    return f"{100 * value:.1f}"


def print_tables(out, eval_set):
    rows = [json.loads(p.read_text()) for p in sorted(out.glob("*/result.json"))]
    print(f"box AP / AP50 (%) on {eval_set} at each evaluated iteration:")
    for row in rows:
        name = pathlib.Path(row["run_dir"]).name
        cells = ", ".join(
            f"{it}: {_pct(v[eval_set][0])}/{_pct(v[eval_set][1])}"
            for it, v in sorted(row["ap"].items(), key=lambda kv: int(kv[0])) if eval_set in v
        )
        print(f"| {name} | {row['overrides'] or '-'} | {cells} | {row['train_s']:.0f} s |")
    print("\nRetinaNet towers: fraction of active (> 0) ReLU outputs (bbox n0/n1, cls n0/n1) per evaluated iteration:")
    for row in rows:
        if row.get("active"):
            name = pathlib.Path(row["run_dir"]).name
            cells = ", ".join(
                f"{it}: " + "/".join(f"{v:.2f}" for _, v in sorted(layers.items()))
                for it, layers in sorted(row["active"].items(), key=lambda kv: int(kv[0]))
            )
            print(f"| {name} | {cells} |")
    print("\nloss curves (mean over each fifth of training):")
    for row in rows:
        name = pathlib.Path(row["run_dir"]).name
        curves = "; ".join(f"{k} " + "/".join(f"{v:.3g}" for v in values) for k, values in row["curves"].items())
        print(f"| {name} | {curves} |")
    groups = {}
    for row in rows:
        group = re.sub(r"_s\d+$", "", pathlib.Path(row["run_dir"]).name)
        final = row["ap"].get(str(row["iterations"]), {}).get(eval_set)
        if final:
            groups.setdefault(group, []).append(final)
    print(f"\nfinal box AP / AP50 (%) on {eval_set}, mean ± std over seeds:")
    for group, finals in groups.items():
        aps, ap50s = [f[0] for f in finals], [f[1] for f in finals]
        std = (lambda v: f" ± {100 * statistics.stdev(v):.1f}" if len(v) > 1 else "")
        print(f"| {group} | {len(finals)} | {_pct(statistics.mean(aps))}{std(aps)} | "
              f"{_pct(statistics.mean(ap50s))}{std(ap50s)} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder of the runs (reused: finished runs are kept)")
    parser.add_argument("--models", default="faster,retinanet", help="comma-separated: faster, retinanet")
    parser.add_argument("--iters", type=int, default=1500, help="training iterations (2 images each)")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated RNG_SEEDs")
    parser.add_argument("--eval-every", type=int, default=300, help="iterations between evaluated checkpoints")
    parser.add_argument("--eval-sets", default="shapes_val", help="comma-separated catalogued datasets")
    parser.add_argument("--name", default=None, help="variant name (default: the model's); runs are <name>_s<seed>")
    parser.add_argument("--opts", nargs="*", default=[], help="config overrides of the variant (KEY VALUE ...)")
    parser.add_argument("--table", action="store_true", help="only print the table of the finished runs")
    add_verbose_flag(parser)
    args = parser.parse_args()
    out = pathlib.Path(args.out).resolve()  # absolute: tfdet.engine.checkpoint doubles a relative folder on resume
    eval_sets = args.eval_sets.split(",")
    if not args.table:
        if len(args.opts) % 2:
            parser.error("--opts takes KEY VALUE pairs")
        overrides = dict(zip(args.opts[::2], args.opts[1::2]))
        for model in args.models.split(","):
            if model not in CONFIGS:
                parser.error(f"unknown model {model}; known: {list(CONFIGS)}")
            for seed in (int(s) for s in args.seeds.split(",")):
                run_dir = out / f"{args.name or model}_s{seed}"
                if (run_dir / "result.json").exists():
                    continue
                print(f"{run_dir.name}: training {args.iters} iterations ...", flush=True)
                row = train_and_evaluate(model, seed, args.iters, args.eval_every, run_dir, overrides, eval_sets)
                row["run_dir"] = str(run_dir)
                (run_dir / "result.json").write_text(json.dumps(row, indent=1))
    backfill_active_units(out)
    print_tables(out, eval_sets[0])


def backfill_active_units(out):
    """Adds the towers' active units to finished RetinaNet runs that lack them."""
    for path in sorted(out.glob("*/result.json")):
        row = json.loads(path.read_text())
        if row["model"] != "retinanet" or row.get("active"):
            continue
        cfg = run_config(row["model"], row["seed"], row["iterations"], int(next(iter(row["ap"]))), path.parent,
                         row["overrides"])
        row["active"] = {it: active_units(cfg, str(path.parent / f"eval_{it}" / "model_final.weights.h5"))
                         for it in row["ap"]}
        path.write_text(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
