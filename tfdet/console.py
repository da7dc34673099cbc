"""A quiet terminal for the command lines: TensorFlow's native log records stay off it unless asked for.

TensorFlow's C++ side (absl's "All log messages before absl::InitializeLog()", oneDNN and CUDA probes,
cpu_feature_guard, Grappler) writes straight to file descriptor 2, some of it before TF_CPP_MIN_LOG_LEVEL
is read and whatever that level says. So a command line, first thing, before TensorFlow is imported:

    if __name__ == "__main__":
        from tfdet.console import quiet_native_logs
        quiet_native_logs()

Python's own stderr (our logging, progress bars, warnings, tracebacks) is moved to a copy of the
terminal's descriptor and keeps writing there; descriptor 2 itself, where only native code writes, then
points at the null device. `--verbose` on the command line or TFDET_VERBOSE=1 leaves everything as it is.
Whatever the verbosity, a ConfigWarning (an old Detectron spelling accepted) prints as one `warning: MESSAGE`
line, as `python -m porting` prints its warnings, not as Python's warning with its source line.

`parse_args_with_overrides`: the command lines' flags may also follow their trailing KEY VALUE overrides.
"""

import logging
import os
import sys
import warnings

from tfdet.config.errors import ConfigWarning

VERBOSE_FLAG = "--verbose"
VERBOSE_ENV = "TFDET_VERBOSE"
VERBOSE_HELP = f"show TensorFlow's own log records too (or set {VERBOSE_ENV}=1)"


def wants_verbose(argv=None):
    """True when the command line has --verbose or TFDET_VERBOSE is set to something other than 0."""
    argv = sys.argv[1:] if argv is None else argv
    return VERBOSE_FLAG in argv or os.environ.get(VERBOSE_ENV, "0") not in ("", "0")


def quiet_native_logs(argv=None):
    """Unless verbose, send native writes to descriptor 2 to the null device and keep Python's stderr on
    the terminal; TensorFlow's Python-side log records below ERROR are dropped too, and absl's below WARNING
    (TensorFlow's checkpoint writer logs an INFO "Sharding callback duration" at every save). Returns whether it did.
    ConfigWarnings print as one line either way (`one_line_config_warnings`)."""
    one_line_config_warnings()
    if wants_verbose(argv):
        return False
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    logging.getLogger("absl").setLevel(logging.WARNING)
    sys.stderr.flush()
    terminal = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    os.close(null)
    sys.stderr = os.fdopen(terminal, "w", buffering=1, encoding=sys.stderr.encoding, errors="backslashreplace")
    sys.__stderr__ = sys.stderr  # tqdm and logging fall back to it
    return True


def add_verbose_flag(parser):
    """Declare --verbose on an argparse parser (quiet_native_logs has read it before TensorFlow loaded)."""
    parser.add_argument(VERBOSE_FLAG, action="store_true", help=VERBOSE_HELP)


def one_line_config_warnings():
    """Show each ConfigWarning as `warning: MESSAGE` on the current stderr; other warnings as Python shows them."""
    show_other = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, ConfigWarning):
            print(f"warning: {message}", file=file or sys.stderr)
        else:
            show_other(message, category, filename, lineno, file, line)

    warnings.showwarning = show


def parse_args_with_overrides(parser, argv=None):
    """`parser.parse_args(argv)` for a command line ending in KEY VALUE overrides (the positional `opts`, nargs
    argparse.REMAINDER), where the parser's flags may also come after them: an item in a KEY's place that is
    one of the parser's flags is moved, with its value, before the overrides. A VALUE is never read as a flag."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    head, rest = argv[: len(argv) - len(args.opts)], list(args.opts)
    flags, overrides = [], []
    while rest:
        action = parser._option_string_actions.get(rest[0].split("=", 1)[0])  # argparse's table of flags
        if action is None:
            overrides, rest = overrides + rest[:2], rest[2:]
        else:
            width = 1 if action.nargs == 0 or "=" in rest[0] else 2
            flags, rest = flags + rest[:width], rest[width:]
    return parser.parse_args(head + flags + overrides) if flags else args
