"""python -m tfdet.infer_video: VideoPose3D's `inference/infer_video.py` command line.

    python -m tfdet.infer_video --cfg X.yaml --wts W --output-dir DIR --image-ext mp4 VIDEO_OR_FOLDER [KEY VALUE ...]

VideoPose3D's Detectron script (copied into Detectron's tools/ and run there) with only the program
name changed. As there, a folder means its `*.<image-ext>` files (a non-recursive, case-sensitive
glob), anything else one video; each video gets `<output-dir>/<video file name>.npz`, the 2D
detections VideoPose3D's `data/prepare_data_2d_custom.py` reads (`tfdet.outputs.videopose3d`).

It runs `python -m tfdet.infer --videopose3d --no-vis` (which also writes `detections.json` and
`images.json` beside the archives; prepare_data_2d_custom.py reads only `*.npz`). Differences:
- `--image-ext` defaults to mp4 (as in VideoPose3D's Detectron2 script, infer_video_d2.py): the
  Detectron script inherits infer_simple.py's jpg, which selects pictures, not videos;
- every input must have a video extension tfdet reads (`tfdet.imaging.image_io.VIDEO_EXTENSIONS`): otherwise a
  one-line error;
- a folder without such videos is an error, where the script silently writes nothing;
- trailing KEY VALUE pairs override config keys, as for `tfdet.infer`.
`--wts` may be a Detectron URL, as in VideoPose3D's instructions: downloaded once and md5-checked, as Detectron
does (`tfdet.weights.download`; $TFDET_CACHE, $TFDET_DETECTRON_URL).
`--always-out`, `--output-ext`, `--thresh` and `--kp-thresh` (infer_simple.py's picture options)
are accepted and, as in VideoPose3D's script, change nothing: no pictures are written.
"""

if __name__ == "__main__":  # before TensorFlow is imported: its native log records stay off the terminal
    from tfdet.console import quiet_native_logs

    quiet_native_logs()

import argparse
import glob
import os
import sys

from tfdet.console import add_verbose_flag
from tfdet.imaging.image_io import VIDEO_EXTENSIONS, is_video, list_inputs


class UsageError(Exception):
    """A command line this program cannot honour (reported in one line before TensorFlow is imported)."""


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python -m tfdet.infer_video",
        description="VideoPose3D's infer_video.py: per video, VideoPose3D's 2D keypoint archive <name>.npz.",
    )
    add_verbose_flag(parser)
    parser.add_argument("--cfg", required=True, help="cfg model file (/path/to/model_config.yaml)")
    parser.add_argument(
        "--wts", dest="weights", required=True, help="our .weights.h5, a Detectron .pkl or a Detectron URL"
    )
    parser.add_argument(
        "--output-dir", default="/tmp/infer_simple", help="folder for the .npz archives (default: /tmp/infer_simple)"
    )
    parser.add_argument("--image-ext", default="mp4", help="in a folder, the videos' extension (default: mp4)")
    unused = "accepted as VideoPose3D's script accepts it; no pictures are written, so it changes nothing"
    parser.add_argument("--always-out", action="store_true", help=unused)
    parser.add_argument("--output-ext", default="pdf", help=unused)
    parser.add_argument("--thresh", type=float, default=0.7, help=unused)
    parser.add_argument("--kp-thresh", type=float, default=2.0, help=unused)
    parser.add_argument(
        "rest", nargs="+", metavar="VIDEO_OR_FOLDER [KEY VALUE]", help="a video or a folder of videos; config overrides"
    )
    return parser


def infer_argv(argv):
    """`tfdet.infer`'s command line doing what VideoPose3D's infer_video.py does with `argv`.

    argparse exits on a malformed command line; an input or weights we cannot use raise UsageError.
    """
    parser = build_parser()
    args = parser.parse_intermixed_args(argv)
    source, opts = args.rest[0], args.rest[1:]
    if len(opts) % 2:
        parser.error(f"config overrides come in KEY VALUE pairs, got {opts}")
    if os.path.isdir(source):
        spec = os.path.join(glob.escape(source), "*." + args.image_ext)  # the script's glob, the folder taken as is
    elif os.path.isfile(source):
        spec = source
    else:
        raise UsageError(f"{source}: no such file or folder")
    try:
        videos = list_inputs(spec)
    except FileNotFoundError:
        raise UsageError(f"{source}: no *.{args.image_ext} files in this folder") from None
    for video in videos:
        if not is_video(video):
            known = " ".join(sorted(VIDEO_EXTENSIONS))
            raise UsageError(f"{video}: not a video file name tfdet reads (extensions: {known})")
    return [
        f"--cfg={args.cfg}", f"--weights={args.weights}", f"--output={args.output_dir}",
        f"--input={spec}", "--videopose3d", "--no-vis", *opts,
    ]  # fmt: skip


def main(argv=None):
    """The command line; as Detectron's, no arguments at all print the help (exit status 1)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        build_parser().print_help()
        return 1
    try:
        command = infer_argv(argv)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    from tfdet import infer  # imports TensorFlow

    return infer.main(command)


if __name__ == "__main__":
    sys.exit(main())
