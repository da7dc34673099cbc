"""The commands of `python -m porting` as functions of their parsed arguments, each returning its exit status (the
command line's parsing is `porting.__main__`; `porting.zoo` ports zoo models through `port_zoo_model`)."""

import argparse
import pathlib
import sys
import warnings

import numpy as np

from porting.pickle_reader import WeightFileError
from tfdet.weights.download import DownloadError, resolve_weights

PRESERVED_FILE = "preserved_blobs.npz"
INITIALISES = "the file then only initialises the model: its conflicts with the config are warned about"


def build_for_port(cfg, allow_missing):
    """The model of `cfg`; without random draws when the file must fill every weight anyway."""
    from tfdet.layers import placeholder_initialization
    from tfdet.modeling import build_model

    if allow_missing:  # weights the file lacks keep Detectron's random initialisation
        return build_model(cfg)
    with placeholder_initialization():
        return build_model(cfg)


def error_status(message, status):
    print(f"error: {message}", file=sys.stderr)
    return status


def export_detectron(args):
    """The export-detectron command."""
    from porting.detectron_writer import model_to_blobs, write_detectron_pkl
    from tfdet.config import load_config

    folder = pathlib.Path(args.weights).parent
    cfg_path = args.cfg or folder / "config.yaml"
    if not pathlib.Path(cfg_path).is_file():
        return error_status(f"no config: {cfg_path} does not exist, pass --cfg", 1)
    preserved_path = pathlib.Path(args.preserved) if args.preserved else folder / PRESERVED_FILE
    preserved = {}
    if preserved_path.is_file():
        with np.load(preserved_path, allow_pickle=False) as stored:
            preserved = {name: stored[name] for name in stored.files}
    elif args.preserved:
        return error_status(f"{preserved_path} does not exist", 1)
    cfg = load_config(cfg_path, args.opts)
    model = build_for_port(cfg, allow_missing=False)
    model.load_weights(args.weights)
    blobs = model_to_blobs(model, cfg.MRCNN.ROI_MASK_HEAD, preserved)
    write_detectron_pkl(args.out, blobs, cfg.dump())
    print(f"wrote {len(blobs)} blobs ({len(preserved)} preserved) to {args.out}")
    return 0


def port_detectron(args):
    """The detectron command."""
    from porting.detectron_loader import port_weight_file
    from porting.file_config import FileConfigError, config_from_cfg_text
    from porting.pickle_reader import read_weight_file
    from tfdet.config import ConfigError, load_config

    try:
        args.weights = resolve_weights(args.weights)  # a URL or catalog:// name: the checked download
    except DownloadError as error:
        return error_status(error, 1)
    try:
        weight_file = read_weight_file(args.weights, progress=True)
    except WeightFileError as error:
        return error_status(error, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if args.cfg:
                cfg = load_config(args.cfg, args.opts)
            else:
                cfg = config_from_cfg_text(weight_file.cfg_text, args.weights, args.opts)
                print(f"building the model from the config saved in {args.weights}")
            model = build_for_port(cfg, args.allow_missing)
            report = port_weight_file(model, cfg, weight_file, args.weights, args.allow_missing, progress=True)
        except (FileConfigError, ConfigError) as error:
            return error_status(error, 1)
        except ValueError as error:
            print(error, file=sys.stderr)
            return 1
        finally:
            for warning in caught:
                print(f"warning: {warning.message}", file=sys.stderr)
    return _write_port(args.out, model, cfg, report)


def port_maskrcnn_benchmark(args):
    """The maskrcnn-benchmark command."""
    from porting.maskrcnn_benchmark_loader import load_maskrcnn_benchmark_weights
    from tfdet.config import load_config

    cfg = load_config(args.cfg, args.opts)
    try:
        args.weights = resolve_weights(args.weights)  # a URL or catalog:// name: the checked download
    except DownloadError as error:
        return error_status(error, 1)
    model = build_for_port(cfg, args.allow_missing)
    try:
        report = load_maskrcnn_benchmark_weights(model, cfg, args.weights, args.allow_missing, progress=True)
    except WeightFileError as error:
        return error_status(error, 2)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 1
    return _write_port(args.out, model, cfg, report)


def zoo(args):
    """The zoo command: --list, or NAME --out DIR."""
    from porting.zoo_models import ZOO_MODELS, cached_sizes, format_zoo_table

    if args.list:
        try:
            sizes = _remote_sizes(ZOO_MODELS) if args.sizes else cached_sizes()
        except DownloadError as error:
            return error_status(error, 1)
        print(format_zoo_table(ZOO_MODELS, sizes))
        where = "as the server gives it" if args.sizes else "of the download when cached (--sizes asks the server)"
        print(f"{len(ZOO_MODELS)} models (Detectron's MODEL_ZOO.md and projects/GN); AP on coco_2014_minival "
              f"(keypoint rows: person only); size {where}")  # fmt: skip
        return 0
    if not args.words or not args.out:
        return error_status("give --list, or a model name and --out DIR", 1)
    return port_zoo_model(args.words[0], args.out, args.words[1:])


def _remote_sizes(models):
    from tfdet.weights.download import remote_size

    return {model.name: remote_size(model.url) for model in models}


def port_zoo_model(name, out, opts=(), weights=None):
    """Download zoo model `name` (md5-checked; `weights`: its download, already made) and port it into `out` as the
    detectron command does with the config saved in the file; the exit status."""
    from porting.zoo_models import ZooError, zoo_model

    try:
        model = zoo_model(name)
    except ZooError as error:
        return error_status(error, 1)
    print(f"{model.name}: {model.task} from Detectron's zoo (model id {model.model_id})")
    args = argparse.Namespace(cfg=None, weights=weights or model.url, out=out, allow_missing=False, opts=list(opts))
    return port_detectron(args)


def _write_port(out, model, cfg, report):
    """DIR/model.weights.h5, DIR/config.yaml (with the box regression weights used), preserved blobs, report.

    A complete port of an 81-class model stores COCO's classes in the weights file (a 2-class keypoint model:
    'person'), as Detectron's and maskrcnn-benchmark's models are COCO's; other class counts, and partial
    ports (--allow-missing: the classifier may be absent), store none (`tfdet.data.model_labels`)."""
    from tfdet.data.coco_classes import model_categories
    from tfdet.data.model_labels import write_model_categories

    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    temporary = out / ".partial.model.weights.h5"  # renamed once complete; Keras wants the .weights.h5 ending
    model.save_weights(temporary)
    categories = model_categories(cfg.MODEL.NUM_CLASSES, cfg.MODEL.KEYPOINTS_ON)
    stores_classes = categories.names is not None and not report.missing
    if stores_classes:
        write_model_categories(temporary, categories)
    temporary.replace(out / "model.weights.h5")
    ported_cfg = cfg.clone()
    ported_cfg.MODEL.BBOX_REG_WEIGHTS = tuple(report.bbox_reg_weights)
    (out / "config.yaml").write_text(ported_cfg.dump())
    if report.preserved:
        np.savez(out / PRESERVED_FILE, **report.preserved)
    print(report.format())
    print(f"wrote {out / 'model.weights.h5'} and {out / 'config.yaml'}")
    if stores_classes:
        print(f"the weights file names the classes: {categories.describe()}")
    return 0
