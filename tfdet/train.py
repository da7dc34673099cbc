"""python -m tfdet.train: train a detector as Detectron's `tools/train_net.py` does, then test it.

    python -m tfdet.train --cfg X.yaml [--skip-test] [--multi-gpu-testing] [KEY VALUE ...]

Trailing KEY VALUE pairs override config keys (e.g. `OUTPUT_DIR out SOLVER.MAX_ITER 1000`); the flags may
also follow them (`... SOLVER.MAX_ITER 1000 --skip-test`).
OUTPUT_DIR receives the checkpoints (`model_iter-<N>`, every TRAIN.SNAPSHOT_ITERS / NUM_GPUS
iterations), `metrics.json` (Detectron's json_stats records, also printed), `tensorboard/`, and
at the end `model_final.weights.h5` with `config.yaml` (what `tfdet.infer`, `tfdet.evaluate` and
`Predictor` take). A run started again with the same OUTPUT_DIR resumes from its last checkpoint
(TRAIN.AUTO_RESUME), or does nothing when the final weights are there. Unless --skip-test, the
final weights are then evaluated on every TEST.DATASETS entry with `python -m tfdet.evaluate`'s
code (`results_<dataset>.json`, `metrics_<dataset>.json` in OUTPUT_DIR).

The strategy follows TFDET.STRATEGY and NUM_GPUS (`tfdet.engine.strategy`). --multi-gpu-testing
is accepted for Detectron's command lines; evaluation always runs in this one process.
Config keys tfdet does not implement for training (and, unless --skip-test, for the final test) are
refused before anything is built (`tfdet.config.support`).
Exit status: 0 done; 1 a loss became NaN/inf (nothing was saved for that iteration), an evaluation image
could not be read, or a config key tfdet does not implement is set (one line per key); 2 bad arguments,
config or files (one-line error).
"""

if __name__ == "__main__":  # before TensorFlow is imported: its native log records stay off the terminal
    from tfdet.console import quiet_native_logs

    quiet_native_logs()

import argparse
import logging
import pathlib
import sys

from tfdet import evaluate
from tfdet.config import check_supported, load_config
from tfdet.config.errors import ConfigError
from tfdet.console import add_verbose_flag, parse_args_with_overrides


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tfdet.train", description=__doc__.split("\n")[0])
    add_verbose_flag(parser)
    parser.add_argument("--cfg", dest="cfg_file", required=True, help="config YAML (Detectron keys)")
    parser.add_argument("--skip-test", action="store_true", help="do not evaluate the final model")
    parser.add_argument("--multi-gpu-testing", action="store_true",
                        help="accepted for Detectron's command lines (evaluation runs in this process)")
    parser.add_argument(
        "opts", nargs=argparse.REMAINDER, help="config overrides: KEY VALUE ... (flags may also follow them)"
    )
    return parse_args_with_overrides(parser, argv)


def main(argv=None):
    args = parse_args(argv)
    if not pathlib.Path(args.cfg_file).is_file():
        print(f"error: config file not found: {args.cfg_file}", file=sys.stderr)
        return 2
    try:
        cfg = load_config(args.cfg_file, args.opts)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        check_uses(cfg, test=not args.skip_test)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from tfdet.data.catalog import check_evaluation_dataset, get_dataset
    from tfdet.engine.checkpoint import NonFiniteLossError  # TensorFlow is imported once the arguments are good
    from tfdet.engine.strategy import is_chief
    from tfdet.engine.trainer import Trainer
    from tfdet.engine.weights import CONFIG_FILE
    from tfdet.startup import freeze_imports

    freeze_imports()
    try:
        if not args.skip_test:  # the final test's datasets are checked before hours of training, not after
            for name in cfg.TEST.DATASETS:
                check_evaluation_dataset(get_dataset(name))
        trainer = Trainer(cfg)
        trainer.initialize()
        result = trainer.train()
    except NonFiniteLossError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except (FileNotFoundError, KeyError, ValueError) as error:  # unknown dataset, missing files, bad NUM_GPUS
        print(f"error: {error.args[0] if isinstance(error, KeyError) else error}", file=sys.stderr)
        return 2
    print(f"final weights: {result.final_weights} (iteration {result.end_iter})")
    if args.skip_test or not is_chief(trainer.strategy):
        return 0
    config_path = str(pathlib.Path(trainer.output_dir) / CONFIG_FILE)
    status = 0
    for dataset in cfg.TEST.DATASETS:
        status = max(status, evaluate.main(
            ["--cfg", config_path, "--weights", result.final_weights, "--dataset", dataset,
             "--output", trainer.output_dir]
        ))
    return status


def check_uses(cfg, test=True, export=False):
    """check_supported for training and, when `test`, for the final test (inference and evaluation of every
    TEST.DATASETS entry), and for `export`: one ConfigError naming each refused key once, before hours of training."""
    uses = [("training", ())] + ([("inference", ()), ("evaluation", cfg.TEST.DATASETS)] if test else [])
    uses += [("export", ())] if export else []
    problems = []
    for use, datasets in uses:
        try:
            check_supported(cfg, use, datasets)
        except ConfigError as error:
            problems += [line for line in str(error).splitlines() if line not in problems]
    if problems:
        raise ConfigError("\n".join(problems))


if __name__ == "__main__":
    sys.exit(main())
