"""python -m porting detectron|maskrcnn-benchmark|export-detectron|zoo ...

`detectron [--cfg X.yaml] --weights in.pkl --out DIR [--allow-missing] [KEY VALUE ...]` ports a
Detectron `.pkl` into the tfdet model of a config (by default the config saved in the file):
writes DIR/model.weights.h5, DIR/config.yaml (the effective config, with the file's box regression
weights), DIR/preserved_blobs.npz (the file's unused blobs, for re-saving) and prints a report of
loaded, ignored, preserved, missing and mismatched blobs and the fields checked against the config.
Exit status 1 when blobs are missing (unless --allow-missing) or mismatched, the model is unknown, a
config value is refused (one line, as on every command), or the file contradicts the config (the saved
cfg's model keys; a .pth's RPN or RetinaNet anchors: porting.config_checks; a warning with
--allow-missing); 2 when the file cannot be read safely. Nothing is written then.

`maskrcnn-benchmark --cfg X.yaml --weights model.pth --out DIR [--allow-missing] [KEY VALUE ...]`
ports a maskrcnn-benchmark checkpoint, read without torch, the same way (its `iteration` reported; a
RetinaNet checkpoint's predictions converted to Detectron's anchor order and box coding, listed).

`--weights` may be a Detectron URL or a maskrcnn-benchmark `catalog://` name: downloaded once into tfdet's
cache and md5-checked (tfdet.weights.download); exit status 1 when that fails.

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
import sys

from porting import commands
from porting.commands import INITIALISES, PRESERVED_FILE
from tfdet.config.errors import ConfigError
from tfdet.console import add_verbose_flag


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


def main(argv=None):
    args = _parse(argv)
    if not (args.command == "zoo" and args.list):
        from tfdet.startup import freeze_imports  # a command line's process: its imports leave the collector

        freeze_imports()
    run = {
        "detectron": commands.port_detectron, "maskrcnn-benchmark": commands.port_maskrcnn_benchmark,
        "export-detectron": commands.export_detectron, "zoo": commands.zoo,
    }  # fmt: skip
    try:
        return run[args.command](args)
    except ConfigError as error:  # a config value refused while loading the config or building its model
        return commands.error_status(error, 1)


if __name__ == "__main__":
    sys.exit(main())
