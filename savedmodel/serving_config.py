"""python -m savedmodel.serving_config --base BASE [--out FILE] [--model-root PATH] [--latest]

Writes a TF Serving `models.config` (a text-format ModelServerConfig) for every model found under
BASE: each folder BASE/NAME holding integer version folders with a saved_model.pb. By default
every version found is served (`model_version_policy { specific { versions: ... } }`); `--latest`
leaves the server's default policy (the highest version only). `--model-root` is BASE as the
server sees it (for example /models inside the tensorflow/serving container).
"""

import argparse
import pathlib
import sys


def find_models(base):
    """{model name: sorted integer versions} of the SavedModels under `base` (BASE/NAME/VERSION)."""
    base = pathlib.Path(base)
    if not base.is_dir():
        raise FileNotFoundError(f"no such folder: {base}")
    models = {}
    for model_dir in sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith(".")):
        versions = sorted(
            int(v.name) for v in model_dir.iterdir() if v.name.isdigit() and (v / "saved_model.pb").is_file()
        )
        if versions:
            models[model_dir.name] = versions
    return models


def models_config_text(models, model_root, latest_only=False):
    """The text-format ModelServerConfig serving `models` ({name: versions}) from `model_root`/NAME."""
    lines = ["model_config_list {"]
    for name, versions in models.items():
        lines += [
            "  config {",
            f"    name: {_quoted(name)}",
            f"    base_path: {_quoted(str(pathlib.PurePosixPath(model_root) / name))}",
            '    model_platform: "tensorflow"',
        ]
        if not latest_only:
            lines += ["    model_version_policy {", "      specific {"]
            lines += [f"        versions: {v}" for v in versions]
            lines += ["      }", "    }"]
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _quoted(text):
    """A protobuf text-format string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m savedmodel.serving_config",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--base", required=True, help="folder holding NAME/VERSION/saved_model.pb")
    parser.add_argument("--out", help="output file (default BASE/models.config)")
    parser.add_argument("--model-root", help="BASE as the model server sees it (default: BASE's absolute path)")
    parser.add_argument("--latest", action="store_true", help="serve only each model's highest version")
    args = parser.parse_args(argv)
    base = pathlib.Path(args.base)
    try:
        models = find_models(base)
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if not models:
        print(f"error: no SavedModel under {base} (expected {base}/NAME/VERSION/saved_model.pb)", file=sys.stderr)
        return 1
    root = args.model_root or base.resolve().as_posix()
    out = pathlib.Path(args.out) if args.out else base / "models.config"
    out.write_text(models_config_text(models, root, args.latest))
    summary = ", ".join(f"{name} {versions}" for name, versions in models.items())
    print(f"wrote {out}: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
