"""Helpers of the tests that run functions of a test module in child processes (each worker of a
multi-worker cluster is a process of its own), free local ports for multi-worker clusters, and the
recognition of TensorFlow's native log records in a command line's stderr."""

import os
import re
import socket
import subprocess
import sys

from support.paths import REPO_ROOT, TESTS_DIR


def run_in_children(module, function, args_per_child, envs=None, timeout=300):
    """Run `module.function(*args)` of a test module in one child process per entry of `args_per_child`,
    concurrently (each with its extra environment variables from `envs`); fail with a child's stderr."""
    children = []
    for args, extra_env in zip(args_per_child, envs or [{}] * len(args_per_child)):
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), CUDA_VISIBLE_DEVICES="", **extra_env)
        # The imports frozen out of the garbage collector, as conftest does in the test processes.
        code = (f"import sys; sys.path.insert(0, {str(TESTS_DIR)!r}); import {module} as t; "
                f"from tfdet.startup import freeze_imports; freeze_imports(); t.{function}(*{args!r})")
        children.append(subprocess.Popen([sys.executable, "-c", code], cwd=REPO_ROOT, env=env,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = [child.communicate(timeout=timeout) for child in children]
    for child, (_, stderr) in zip(children, outputs):
        assert child.returncode == 0, stderr[-4000:]


def free_ports(count):
    """`count` TCP ports free on 127.0.0.1 now."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


# Lines TensorFlow's native side writes: absl/glog records ("I0000 00:00:17956.. 123 file.cc:45] ..."), absl's
# pre-initialisation notice, and the CPU feature notice's second line.
_NATIVE_RECORD = re.compile(
    r"^[IWEF]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ \S+:\d+\]|absl::InitializeLog|^To enable the following instructions:",
    re.M,
)


def native_log_records(text):
    """The lines of `text` (a child's stderr) that TensorFlow's C++ side wrote."""
    return [match.group(0) for match in _NATIVE_RECORD.finditer(text)]
