"""python -m porting detectron|export-detectron ...

`detectron --cfg X.yaml --weights in.pkl --out DIR [--allow-missing]` ports a Detectron `.pkl` into
the tfdet model of a Detectron config: writes DIR/model.weights.h5 and DIR/config.yaml (the config,
with the file's box regression weights) and prints a report of loaded, ignored, missing and
mismatched blobs. Exit status 1 when blobs are missing (unless --allow-missing) or mismatched, 2
when the file cannot be read safely.

`export-detectron --cfg X.yaml --weights model.weights.h5 --out model_final.pkl` writes our
weights back as a Detectron file (`{'blobs', 'cfg'}`, protocol 2, Caffe2 names and layouts).
"""

import argparse
import pathlib
import sys
import warnings

from porting.pickle_reader import WeightFileError


def _parse(argv):
    parser = argparse.ArgumentParser(prog="python -m porting", description="Port legacy detector weights.")
    commands = parser.add_subparsers(dest="command", required=True)
    detectron = commands.add_parser("detectron", help="port a Detectron .pkl (model_final.pkl, R-50.pkl, ...)")
    detectron.add_argument("--cfg", required=True, help="Detectron YAML config of the model")
    detectron.add_argument("--weights", required=True, help="Detectron .pkl weight file")
    detectron.add_argument("--out", required=True, help="output folder")
    detectron.add_argument("--allow-missing", action="store_true", help="accept blobs absent from the file (ImageNet backbones)")
    detectron.add_argument("opts", nargs="*", help="config overrides KEY VALUE ...")
    export = commands.add_parser("export-detectron", help="write tfdet weights as a Detectron .pkl")
    export.add_argument("--cfg", required=True, help="YAML config of the model")
    export.add_argument("--weights", required=True, help="our .weights.h5 file")
    export.add_argument("--out", required=True, help="output .pkl path")
    export.add_argument("opts", nargs="*", help="config overrides KEY VALUE ...")
    return parser.parse_args(argv)


def export_detectron(args):
    """The export-detectron command."""
    from porting.detectron_writer import model_to_blobs, write_detectron_pkl
    from tfdet.config import load_config
    from tfdet.modeling import build_model

    cfg = load_config(args.cfg, args.opts)
    model = build_model(cfg)
    model.load_weights(args.weights)
    blobs = model_to_blobs(model, cfg.MRCNN.ROI_MASK_HEAD)
    write_detectron_pkl(args.out, blobs, cfg.dump())
    print(f"wrote {len(blobs)} blobs to {args.out}")
    return 0


def main(argv=None):
    args = _parse(argv)
    if args.command == "export-detectron":
        return export_detectron(args)
    from porting.detectron_loader import load_detectron_weights
    from tfdet.config import load_config
    from tfdet.modeling import build_model

    cfg = load_config(args.cfg, args.opts)
    model = build_model(cfg)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            report = load_detectron_weights(model, cfg, args.weights, allow_missing=args.allow_missing)
    except WeightFileError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except ValueError as error:
        print(error, file=sys.stderr)
        return 1
    for warning in caught:
        print(f"warning: {warning.message}", file=sys.stderr)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_weights(out / "model.weights.h5")
    ported_cfg = cfg.clone()
    ported_cfg.MODEL.BBOX_REG_WEIGHTS = tuple(report.bbox_reg_weights)
    (out / "config.yaml").write_text(ported_cfg.dump())
    print(report.format())
    print(f"wrote {out / 'model.weights.h5'} and {out / 'config.yaml'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
