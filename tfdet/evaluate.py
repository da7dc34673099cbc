"""python -m tfdet.evaluate: COCO AP of a model on a dataset, or of an existing results file.

    python -m tfdet.evaluate --cfg X.yaml --weights W [--dataset NAME | --annotations A.json --images DIR]
                             [--output DIR] [--batch-size N] [KEY VALUE ...]
    python -m tfdet.evaluate --results R.json (--dataset NAME | --annotations A.json) [--output DIR]

The dataset defaults to the config's TEST.DATASETS[0]. Results (Detectron's conventions, see
`tfdet.evaluation.results`) and metrics go to `--output` (default: the config's OUTPUT_DIR, or the
results file's folder) as `results_<dataset>.json` and `metrics_<dataset>.json`. Images that cannot
be read are reported, left out of the evaluation, and make the exit status 1; bad arguments or
missing files give a one-line error and exit status 2.
"""

if __name__ == "__main__":  # before TensorFlow is imported: its native log records stay off the terminal
    from tfdet.console import quiet_native_logs

    quiet_native_logs()

import argparse
import pathlib
import sys

from tqdm import tqdm

from tfdet.config import load_config
from tfdet.config.errors import ConfigError
from tfdet.console import add_verbose_flag
from tfdet.data.catalog import DatasetSpec, get_dataset
from tfdet.evaluation import (
    contiguous_to_json_ids,
    detections_to_coco,
    evaluate_results,
    load_coco,
    read_results,
    write_metrics,
    write_results,
)
from tfdet.evaluation.coco_evaluator import iou_types_of, keypoint_names
from tfdet.image_io import UnreadableImage, read_image


class UsageError(Exception):
    """A problem with the command line or its files, reported in one line."""


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tfdet.evaluate", description=__doc__.split("\n")[0])
    add_verbose_flag(parser)
    parser.add_argument("--cfg", help="config YAML (Detectron keys)")
    parser.add_argument("--weights", help="model weights: our .weights.h5 or a Detectron .pkl")
    parser.add_argument("--dataset", help="a dataset name of tfdet.data.catalog (default: TEST.DATASETS[0])")
    parser.add_argument("--annotations", help="a COCO annotation json (instead of --dataset)")
    parser.add_argument("--images", help="the image folder of --annotations")
    parser.add_argument("--results", help="evaluate this COCO results json instead of running a model")
    parser.add_argument("--output", help="folder for the results and metrics json (default: OUTPUT_DIR)")
    parser.add_argument("--batch-size", type=int, help="images per model call (default: TEST.IMS_PER_BATCH, else 1)")
    parser.add_argument("opts", nargs=argparse.REMAINDER, help="config overrides: KEY VALUE ...")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        return _evaluate(args)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def _evaluate(args):
    cfg = _config(args)
    dataset = _dataset(args, cfg, need_images=args.results is None)
    coco_gt = _checked(load_coco, dataset.annotation_file)
    output_dir = pathlib.Path(args.output or (cfg.OUTPUT_DIR if cfg is not None else pathlib.Path(args.results).parent))
    unreadable = []
    if args.results:
        results = _checked(read_results, args.results)
        iou_types = iou_types_of(results) or (model_iou_types(cfg) if cfg is not None else ["bbox"])
    else:
        iou_types = model_iou_types(cfg)
        _check_model_matches_dataset(cfg, coco_gt)
        if not args.weights:
            raise UsageError("--weights is needed to run a model")
        if not pathlib.Path(args.weights).is_file():
            raise UsageError(f"weights file not found: {args.weights}")
        results, unreadable = predict_dataset(cfg, args.weights, coco_gt, dataset.image_dir, _batch_size(args, cfg))
        results_path = output_dir / f"results_{dataset.name}.json"
        write_results(results_path, results)
        print(f"wrote {len(results)} results to {results_path}")
    skipped = {image_id for image_id, _ in unreadable}
    image_ids = [i for i in coco_gt.getImgIds() if i not in skipped]
    metrics = _checked(evaluate_results, coco_gt, results, iou_types, image_ids)
    metrics_path = output_dir / f"metrics_{dataset.name}.json"
    write_metrics(metrics_path, metrics)
    print(f"wrote metrics to {metrics_path}")
    if unreadable:
        print(f"error: {len(unreadable)} image(s) could not be read and were left out:", file=sys.stderr)
        for _, message in unreadable:
            print(f"  {message}", file=sys.stderr)
        return 1
    return 0


def _checked(function, *args):
    """Call `function`, turning a bad-file error into a UsageError."""
    try:
        return function(*args)
    except (OSError, ValueError) as error:
        raise UsageError(str(error)) from None


def _config(args):
    if args.cfg is None:
        if args.results is None:
            raise UsageError("--cfg and --weights are needed to run a model (or give --results)")
        if args.opts:
            raise UsageError(f"config overrides {args.opts} need --cfg")
        return None
    if not pathlib.Path(args.cfg).is_file():
        raise UsageError(f"config file not found: {args.cfg}")
    try:
        return load_config(args.cfg, args.opts)
    except ConfigError as error:
        raise UsageError(str(error)) from None


def _dataset(args, cfg, need_images):
    if args.annotations:
        if args.dataset:
            raise UsageError("give --dataset or --annotations, not both")
        if need_images and not args.images:
            raise UsageError("--annotations needs --images (the folder its file_names are in)")
        image_dir = pathlib.Path(args.images) if args.images else None
        if image_dir is not None and not image_dir.is_dir():
            raise UsageError(f"image folder not found: {image_dir}")
        return DatasetSpec(pathlib.Path(args.annotations).stem, image_dir, pathlib.Path(args.annotations))
    name = args.dataset
    if name is None:
        if cfg is None or not cfg.TEST.DATASETS:
            raise UsageError("no dataset: give --dataset, --annotations, or a config with TEST.DATASETS")
        name = cfg.TEST.DATASETS[0]
    try:
        return get_dataset(name)
    except KeyError as error:
        raise UsageError(error.args[0]) from None
    except FileNotFoundError as error:
        raise UsageError(str(error)) from None


def _batch_size(args, cfg):
    batch_size = args.batch_size or cfg.TEST.get("IMS_PER_BATCH", 1)
    if batch_size < 1:
        raise UsageError(f"--batch-size must be at least 1, got {batch_size}")
    return batch_size


def model_iou_types(cfg):
    """The iou types a model configured by `cfg` produces."""
    if cfg.MODEL.RPN_ONLY:
        raise UsageError("RPN-only models give proposals, not detections; COCO AP does not apply")
    return ["bbox"] + ["segm"] * bool(cfg.MODEL.MASK_ON) + ["keypoints"] * bool(cfg.MODEL.KEYPOINTS_ON)


def _check_model_matches_dataset(cfg, coco_gt):
    num_categories = len(coco_gt.getCatIds())
    if cfg.MODEL.NUM_CLASSES != num_categories + 1:
        raise UsageError(
            f"the model has MODEL.NUM_CLASSES {cfg.MODEL.NUM_CLASSES}, the dataset {num_categories} categories "
            f"(+1 background = {num_categories + 1})"
        )
    if cfg.MODEL.KEYPOINTS_ON:
        names = keypoint_names(coco_gt)
        if names is None or len(names) != cfg.KRCNN.NUM_KEYPOINTS:
            found = 0 if names is None else len(names)
            raise UsageError(f"the model predicts {cfg.KRCNN.NUM_KEYPOINTS} keypoints, the dataset has {found}")


def predict_dataset(cfg, weights, coco_gt, image_dir, batch_size=1):
    """COCO results of a Predictor on every image of `coco_gt`, and [(image_id, message)] of unreadable ones."""
    from tfdet.inference import Predictor  # TensorFlow is imported only when a model runs

    predictor = Predictor(cfg, weights)
    category_ids = contiguous_to_json_ids(coco_gt)
    image_ids = sorted(coco_gt.getImgIds())
    results, unreadable = [], []
    with tqdm(total=len(image_ids), desc="evaluate", unit="image", disable=None) as progress:
        for start in range(0, len(image_ids), batch_size):
            ids, images = [], []
            for image_id in image_ids[start : start + batch_size]:
                try:
                    images.append(read_image(pathlib.Path(image_dir) / coco_gt.imgs[image_id]["file_name"]))
                    ids.append(image_id)
                except UnreadableImage as error:
                    unreadable.append((image_id, str(error)))
                    tqdm.write(f"skipping unreadable image: {error}", file=sys.stderr)
            for image_id, detections in zip(ids, predictor.predict(images) if images else []):
                results += detections_to_coco(detections, image_id, category_ids, cfg.KRCNN.KEYPOINT_CONFIDENCE)
            progress.update(len(image_ids[start : start + batch_size]))
    return results, unreadable


if __name__ == "__main__":
    sys.exit(main())
