"""python -m porting detectron|maskrcnn-benchmark|export-detectron|zoo ...

`detectron [--cfg X.yaml] --weights in.pkl --out DIR [--allow-missing] [KEY VALUE ...]` ports a
Detectron `.pkl` into the tfdet model of a config (by default the config saved in the file):
writes DIR/model.weights.h5, DIR/config.yaml (the effective config, with the file's box regression
weights), DIR/preserved_blobs.npz (the file's unused blobs, for re-saving) and prints a report of
loaded, ignored, preserved, missing and mismatched blobs and the fields checked against the config.
Exit status 1 when blobs are missing (unless --allow-missing) or mismatched, the model is unknown, or
the file contradicts the config (the saved cfg's model keys; a .pth's RPN or RetinaNet anchors:
porting.config_checks; a warning with --allow-missing); 2 when the file cannot be read safely. Nothing
is written then.

`maskrcnn-benchmark --cfg X.yaml --weights model.pth --out DIR [--allow-missing] [KEY VALUE ...]`
ports a maskrcnn-benchmark checkpoint, read without torch, the same way (its `iteration` reported; a
RetinaNet checkpoint's predictions converted to Detectron's anchor order and box coding, listed).

`--weights` may be a Detectron URL or a maskrcnn-benchmark `catalog://` name: downloaded once into tfdet's
cache and md5-checked (tfdet.download); exit status 1 when that fails.

`zoo --list [--sizes]` prints Detectron's trained models by name (porting.zoo_models: MODEL_ZOO.md and the GN
models) with task, box / mask / keypoint AP and size (of the cached download; --sizes asks the server);
`zoo NAME --out DIR [KEY VALUE ...]` downloads model NAME and ports it as `detectron` does with the config saved
in its file; an unknown NAME is one line with the closest names (exit status 1).

`export-detectron [--cfg X.yaml] --weights DIR/model.weights.h5 --out model_final.pkl` writes our
weights back as a Detectron file (`{'blobs', 'cfg'}`, protocol 2, Caffe2 names and layouts), with
the preserved blobs of the port when DIR holds them.
"""

if __name__ == "__main__":  # before TensorFlow is imported: its native log records stay off the terminal
    from tfdet.console import quiet_native_logs

    quiet_native_logs()

import argparse
import pathlib
import sys
import warnings

import numpy as np

from porting.pickle_reader import WeightFileError
from tfdet.console import add_verbose_flag
from tfdet.download import DownloadError, resolve_weights

PRESERVED_FILE = "preserved_blobs.npz"
INITIALISES = "the file then only initialises the model: its conflicts with the config are warned about"


def _parse(argv):
    parser = argparse.ArgumentParser(prog="python -m porting", description="Port legacy detector weights.")
    commands = parser.add_subparsers(dest="command", required=True)
    detectron = commands.add_parser("detectron", help="port a Detectron .pkl (model_final.pkl, R-50.pkl, ...)")
    add_verbose_flag(detectron)
    detectron.add_argument("--cfg", help="Detectron YAML config of the model (default: the config saved in the file)")
    detectron.add_argument("--weights", required=True, help="Detectron .pkl weight file")
    detectron.add_argument("--out", required=True, help="output folder")
    detectron.add_argument("--allow-missing", action="store_true", help=f"accept blobs absent from the file (ImageNet backbones); {INITIALISES}")
    detectron.add_argument("opts", nargs="*", help="config overrides KEY VALUE ...")
    benchmark = commands.add_parser("maskrcnn-benchmark", help="port a maskrcnn-benchmark .pth (read without torch)")
    add_verbose_flag(benchmark)
    benchmark.add_argument("--cfg", required=True, help="Detectron-style YAML config of the model")
    benchmark.add_argument("--weights", required=True, help="maskrcnn-benchmark .pth checkpoint or state dict")
    benchmark.add_argument("--out", required=True, help="output folder")
    benchmark.add_argument("--allow-missing", action="store_true", help=f"accept weights absent from the file; {INITIALISES}")
    benchmark.add_argument("opts", nargs="*", help="config overrides KEY VALUE ...")
    zoo = commands.add_parser("zoo", help="list Detectron's trained models, or download and port one by name")
    add_verbose_flag(zoo)
    zoo.add_argument("--list", action="store_true", help="print the zoo's models")
    zoo.add_argument("--sizes", action="store_true", help="with --list: ask the server for each download's size")
    zoo.add_argument("--out", help="output folder of the port")
    zoo.add_argument("words", nargs="*", metavar="NAME [KEY VALUE ...]",
                     help="the model's config name (e.g. e2e_mask_rcnn_R-50-FPN_1x), then config overrides")  # fmt: skip
    export = commands.add_parser("export-detectron", help="write tfdet weights as a Detectron .pkl")
    add_verbose_flag(export)
    export.add_argument("--cfg", help="YAML config of the model (default: config.yaml next to --weights)")
    export.add_argument("--weights", required=True, help="our .weights.h5 file")
    export.add_argument("--out", required=True, help="output .pkl path")
    export.add_argument("--preserved", help=f"blobs to carry over (default: {PRESERVED_FILE} next to --weights, if any)")
    export.add_argument("opts", nargs="*", help="config overrides KEY VALUE ...")
    args, extra = parser.parse_known_args(argv)
    if extra and (args.command != "zoo" or any(word.startswith("-") for word in extra)):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if extra:  # `zoo NAME --out DIR KEY VALUE`: argparse leaves overrides after an option over
        args.words += extra
    return args


def _build_for_port(cfg, allow_missing):
    """The model of `cfg`; without random draws when the file must fill every weight anyway."""
    from tfdet.layers import placeholder_initialization
    from tfdet.modeling import build_model
    from tfdet.startup import freeze_imports

    freeze_imports()
    if allow_missing:  # weights the file lacks keep Detectron's random initialisation
        return build_model(cfg)
    with placeholder_initialization():
        return build_model(cfg)


def _error(message, status):
    print(f"error: {message}", file=sys.stderr)
    return status


def export_detectron(args):
    """The export-detectron command."""
    from porting.detectron_writer import model_to_blobs, write_detectron_pkl
    from tfdet.config import load_config

    folder = pathlib.Path(args.weights).parent
    cfg_path = args.cfg or folder / "config.yaml"
    if not pathlib.Path(cfg_path).is_file():
        return _error(f"no config: {cfg_path} does not exist, pass --cfg", 1)
    preserved_path = pathlib.Path(args.preserved) if args.preserved else folder / PRESERVED_FILE
    preserved = {}
    if preserved_path.is_file():
        with np.load(preserved_path, allow_pickle=False) as stored:
            preserved = {name: stored[name] for name in stored.files}
    elif args.preserved:
        return _error(f"{preserved_path} does not exist", 1)
    cfg = load_config(cfg_path, args.opts)
    model = _build_for_port(cfg, allow_missing=False)
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
    from tfdet.config import load_config

    try:
        args.weights = resolve_weights(args.weights)  # a URL or catalog:// name: the checked download
    except DownloadError as error:
        return _error(error, 1)
    try:
        weight_file = read_weight_file(args.weights, progress=True)
    except WeightFileError as error:
        return _error(error, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if args.cfg:
                cfg = load_config(args.cfg, args.opts)
            else:
                cfg = config_from_cfg_text(weight_file.cfg_text, args.weights, args.opts)
                print(f"building the model from the config saved in {args.weights}")
            model = _build_for_port(cfg, args.allow_missing)
            report = port_weight_file(model, cfg, weight_file, args.weights, args.allow_missing, progress=True)
        except FileConfigError as error:
            return _error(error, 1)
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
        return _error(error, 1)
    model = _build_for_port(cfg, args.allow_missing)
    try:
        report = load_maskrcnn_benchmark_weights(model, cfg, args.weights, args.allow_missing, progress=True)
    except WeightFileError as error:
        return _error(error, 2)
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
            return _error(error, 1)
        print(format_zoo_table(ZOO_MODELS, sizes))
        where = "as the server gives it" if args.sizes else "of the download when cached (--sizes asks the server)"
        print(f"{len(ZOO_MODELS)} models (Detectron's MODEL_ZOO.md and projects/GN); AP on coco_2014_minival "
              f"(keypoint rows: person only); size {where}")  # fmt: skip
        return 0
    if not args.words or not args.out:
        return _error("give --list, or a model name and --out DIR", 1)
    return port_zoo_model(args.words[0], args.out, args.words[1:])


def _remote_sizes(models):
    from tfdet.download import remote_size

    return {model.name: remote_size(model.url) for model in models}


def port_zoo_model(name, out, opts=(), weights=None):
    """Download zoo model `name` (md5-checked; `weights`: its download, already made) and port it into `out` as the
    detectron command does with the config saved in the file; the exit status."""
    from porting.zoo_models import ZooError, zoo_model

    try:
        model = zoo_model(name)
    except ZooError as error:
        return _error(error, 1)
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


def main(argv=None):
    args = _parse(argv)
    commands = {
        "detectron": port_detectron, "maskrcnn-benchmark": port_maskrcnn_benchmark,
        "export-detectron": export_detectron, "zoo": zoo,
    }  # fmt: skip
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
