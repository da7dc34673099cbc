"""python -m tfdet.evaluate: COCO AP of a model on a dataset, or of an existing results file.

    python -m tfdet.evaluate --cfg X.yaml --weights W [--dataset NAME | --annotations A.json --images DIR]
                             [--output DIR] [--batch-size N] [KEY VALUE ...]
    python -m tfdet.evaluate --results R.json (--dataset NAME | --annotations A.json) [--output DIR]

Without --dataset or --annotations a model is evaluated on every TEST.DATASETS entry, as Detectron's
test_net does. The weights default to the config's TEST.WEIGHTS. Results (Detectron's conventions, see
`tfdet.evaluation.results`) and metrics go to `--output` (default: the config's OUTPUT_DIR, or the
results file's folder) as `results_<dataset>.json` (deleted after evaluation when TEST.COMPETITION_MODE
is False, as Detectron's cleanup does) and `metrics_<dataset>.json`; VIS adds Detectron's pictures
`vis/<index>_<image>.pdf` of the detections scoring at least VIS_TH. Images that cannot be read are
reported, left out of the evaluation, and make the exit status 1, as does a config key tfdet does not
implement (`tfdet.config.support`); bad arguments or missing files give a one-line error and exit status 2.
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
from tfdet.config.support import check_supported
from tfdet.console import add_verbose_flag, parse_args_with_overrides
from tfdet.data.catalog import DatasetSpec, check_evaluation_dataset, get_dataset
from tfdet.data.coco_classes import model_categories
from tfdet.data.model_labels import read_model_categories
from tfdet.evaluation import (
    detections_to_coco,
    evaluate_results,
    load_coco,
    read_results,
    write_metrics,
    write_results,
)
from tfdet.evaluation.coco_evaluator import iou_types_of, keypoint_names
from tfdet.imaging.image_io import UnreadableImage, read_image, write_picture
from tfdet.startup import freeze_imports
from tfdet.weights.weights_file import weights_file

VIS_KEYPOINT_THRESHOLD = 2.0  # vis_one_image's kp_thresh, which test_net leaves at its default


class UsageError(Exception):
    """A problem with the command line or its files, reported in one line."""


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tfdet.evaluate", description=__doc__.split("\n")[0])
    add_verbose_flag(parser)
    parser.add_argument("--cfg", help="config YAML (Detectron keys)")
    parser.add_argument(
        "--weights",
        help="model weights: our .weights.h5 or a Detectron .pkl, a Detectron URL or catalog:// name (downloaded "
        "and md5-checked) (default: TEST.WEIGHTS)",
    )
    parser.add_argument(
        "--dataset",
        help="a dataset name: tfdet.data.catalog's, $TFDET_DATA_DIR/datasets.yaml's, or "
        "coco:ANNOTATIONS.json:IMAGE_DIR (default: each of TEST.DATASETS)",
    )
    parser.add_argument("--annotations", help="a COCO annotation json (instead of --dataset)")
    parser.add_argument("--images", help="the image folder of --annotations")
    parser.add_argument("--results", help="evaluate this COCO results json instead of running a model")
    parser.add_argument("--output", help="folder for the results and metrics json (default: OUTPUT_DIR)")
    parser.add_argument("--batch-size", type=int, help="images per model call (default: TEST.IMS_PER_BATCH, else 1)")
    parser.add_argument(
        "opts", nargs=argparse.REMAINDER, help="config overrides: KEY VALUE ... (flags may also follow them)"
    )
    return parse_args_with_overrides(parser, argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        cfg = _config(args)
        datasets = _datasets(args, cfg, need_images=args.results is None)
        if cfg is not None:  # keys tfdet does not implement are refused before any work
            check_supported(cfg, "evaluation", [dataset.name for dataset in datasets])
            if args.results is None:
                check_supported(cfg, "inference")
        if not args.output:
            print(f"results and metrics go to {_output_dir(args, cfg).resolve()} ({_output_origin(args, cfg)})")
        model = _Model(cfg, args.weights or cfg.TEST.WEIGHTS) if args.results is None else None
        return max([_evaluate(args, cfg, dataset, model) for dataset in datasets])
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


class _Model:
    """The model a run evaluates on each of its datasets: its weights checked (a URL downloaded and md5-checked),
    the classes they store read, and its Predictor built, each once, when the first dataset needs them (after
    that dataset's own checks)."""

    def __init__(self, cfg, weights):
        self.cfg, self._weights_value = cfg, weights
        self._weights = self._stored = self._predictor = None

    def weights(self):
        """The WeightsFile; UsageError in one line when there is none or it is missing or unknown."""
        if self._weights is None:
            if not self._weights_value:
                raise UsageError("--weights (or TEST.WEIGHTS) is needed to run a model")
            self._weights = _checked(weights_file, self._weights_value, self.cfg.DOWNLOAD_CACHE)
            self._stored = _checked(read_model_categories, self._weights.path)
        return self._weights

    def categories(self, annotation_file):
        """The model's classes on a dataset (`model_categories`: those its weights store must be the dataset's
        categories, names and ids; else the dataset's), or a UsageError naming both before any model is built."""
        self.weights()
        num_classes, keypoints_on = self.cfg.MODEL.NUM_CLASSES, self.cfg.MODEL.KEYPOINTS_ON
        return _checked(model_categories, num_classes, keypoints_on, annotation_file, self._stored)

    def predictor(self, categories):
        """The Predictor of the config and weights (built on the first call: `categories` are the first
        dataset's, which `Predictor.categories` keeps)."""
        if self._predictor is None:
            from tfdet.inference import Predictor  # TensorFlow is imported only when a model runs

            self._predictor = Predictor.from_checked(self.cfg, self.weights(), categories)
        return self._predictor


def _evaluate(args, cfg, dataset, model=None):
    """Evaluate on one dataset (a model run of `model`, a _Model, or --results); the exit status."""
    coco_gt = _checked(load_coco, dataset.annotation_file)
    output_dir = _output_dir(args, cfg)
    unreadable, results_path = [], None
    if args.results:
        results = _checked(read_results, args.results)
        iou_types = iou_types_of(results) or (model_iou_types(cfg) if cfg is not None else ["bbox"])
    else:
        iou_types = model_iou_types(cfg)
        _check_model_matches_dataset(cfg, coco_gt)
        categories = model.categories(dataset.annotation_file)
        vis = vis_writer(cfg, categories, output_dir)
        freeze_imports()
        results, unreadable = dataset_predictions(
            model.predictor(categories), categories.json_ids, coco_gt, dataset.image_dir, _batch_size(args, cfg), vis
        )
        results_path = output_dir / f"results_{dataset.file_stem}.json"
        write_results(results_path, results)
        print(f"wrote {len(results)} results to {results_path}")
    skipped = {image_id for image_id, _ in unreadable}
    image_ids = [i for i in coco_gt.getImgIds() if i not in skipped]
    metrics = _checked(evaluate_results, coco_gt, results, iou_types, image_ids)
    metrics_path = output_dir / f"metrics_{dataset.file_stem}.json"
    write_metrics(metrics_path, metrics)
    print(f"wrote metrics to {metrics_path}")
    if results_path is not None and not cfg.TEST.COMPETITION_MODE:
        results_path.unlink()  # Detectron's evaluators clean their results file up unless in competition mode
        print(f"deleted {results_path} (TEST.COMPETITION_MODE False)")
    if unreadable:
        print(f"error: {len(unreadable)} image(s) could not be read and were left out:", file=sys.stderr)
        for _, message in unreadable:
            print(f"  {message}", file=sys.stderr)
        return 1
    return 0


def _output_dir(args, cfg):
    """Where results and metrics go: --output, else the config's OUTPUT_DIR, else the folder of --results."""
    return pathlib.Path(args.output or (cfg.OUTPUT_DIR if cfg is not None else pathlib.Path(args.results).parent))


def _output_origin(args, cfg):
    """Why `_output_dir` is that folder, when --output did not name it."""
    origin = f"the config's OUTPUT_DIR {cfg.OUTPUT_DIR}" if cfg is not None else "the folder of --results"
    return f"{origin}; --output DIR writes elsewhere"


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


def _datasets(args, cfg, need_images):
    """The DatasetSpecs to evaluate on: --annotations, --dataset, or every TEST.DATASETS entry."""
    if args.annotations:
        if args.dataset:
            raise UsageError("give --dataset or --annotations, not both")
        if need_images and not args.images:
            raise UsageError("--annotations needs --images (the folder its file_names are in)")
        image_dir = pathlib.Path(args.images) if args.images else None
        if image_dir is not None and not image_dir.is_dir():
            raise UsageError(f"image folder not found: {image_dir}")
        spec = DatasetSpec(pathlib.Path(args.annotations).stem, image_dir, pathlib.Path(args.annotations))
        return [_checked(check_evaluation_dataset, spec, need_images)]
    if args.dataset is not None:
        names = [args.dataset]
    elif cfg is None or not cfg.TEST.DATASETS:
        raise UsageError("no dataset: give --dataset, --annotations, or a config with TEST.DATASETS")
    elif args.results and len(cfg.TEST.DATASETS) > 1:
        raise UsageError(f"--results holds one dataset's detections: name it with --dataset (TEST.DATASETS has "
                         f"{len(cfg.TEST.DATASETS)})")  # fmt: skip
    else:
        names = list(cfg.TEST.DATASETS)
    try:
        return [check_evaluation_dataset(get_dataset(name), need_images) for name in names]
    except KeyError as error:
        raise UsageError(error.args[0]) from None
    except (FileNotFoundError, ValueError) as error:  # missing files, a bad json, a malformed coco: name
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


def predict_dataset(cfg, weights, coco_gt, image_dir, batch_size=1, vis=None):
    """COCO results of a Predictor on every image of `coco_gt`, and [(image_id, message)] of unreadable ones.
    Their category ids are the model's dataset ids, which must be `coco_gt`'s (ValueError naming both).

    `vis(index, file_name, image, detections)`, when given, sees every image (index: its position among
    the sorted image ids, Detectron's roidb order)."""
    from tfdet.inference import Predictor  # TensorFlow is imported only when a model runs

    predictor = Predictor(cfg, weights)
    num_classes, keypoints_on = cfg.MODEL.NUM_CLASSES, cfg.MODEL.KEYPOINTS_ON
    category_ids = model_categories(num_classes, keypoints_on, coco_gt.dataset, predictor.categories).json_ids
    return dataset_predictions(predictor, category_ids, coco_gt, image_dir, batch_size, vis)


def dataset_predictions(predictor, category_ids, coco_gt, image_dir, batch_size=1, vis=None):
    """`predict_dataset` with a Predictor already built: COCO results with `category_ids` (the dataset ids of
    the contiguous classes), and [(image_id, message)] of unreadable images."""
    cfg = predictor.cfg
    image_ids = sorted(coco_gt.getImgIds())
    results, unreadable = [], []
    with tqdm(total=len(image_ids), desc="evaluate", unit="image", disable=None) as progress:
        for start in range(0, len(image_ids), batch_size):
            indices, images = [], []
            for index in range(start, min(start + batch_size, len(image_ids))):
                image_id = image_ids[index]
                try:
                    images.append(read_image(pathlib.Path(image_dir) / coco_gt.imgs[image_id]["file_name"]))
                    indices.append(index)
                except UnreadableImage as error:
                    unreadable.append((image_id, str(error)))
                    tqdm.write(f"skipping unreadable image: {error}", file=sys.stderr)
            for index, image, detections in zip(indices, images, predictor.predict(images) if images else []):
                image_id = image_ids[index]
                results += detections_to_coco(detections, image_id, category_ids, cfg.KRCNN.KEYPOINT_CONFIDENCE)
                if vis is not None:
                    vis(index, coco_gt.imgs[image_id]["file_name"], image, detections)
            progress.update(len(image_ids[start : start + batch_size]))
    return results, unreadable


def vis_writer(cfg, categories, output_dir):
    """Detectron's test_net pictures when cfg.VIS, else None: `vis(index, file_name, image, detections)` writes
    `<output_dir>/vis/<index>_<image name>.pdf` with the detections scoring at least VIS_TH, for the images
    that have one (vis_one_image draws nothing otherwise), classes named by `categories` (a ModelCategories)."""
    if not cfg.VIS:
        return None
    from tfdet.visualize import draw_detections  # imports TensorFlow

    folder = pathlib.Path(output_dir) / "vis"
    folder.mkdir(parents=True, exist_ok=True)

    def vis(index, file_name, image, detections):
        if len(detections["scores"]) == 0 or detections["scores"].max() < cfg.VIS_TH:
            return
        picture = draw_detections(
            image, detections, categories.names, cfg.VIS_TH, VIS_KEYPOINT_THRESHOLD, categories.skeleton
        )
        write_picture(folder / f"{index}_{pathlib.PurePath(file_name).stem}.pdf", picture)

    return vis


if __name__ == "__main__":
    sys.exit(main())
