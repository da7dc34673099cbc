"""LiteRT (.tflite) exports opened for `savedmodel.runtimes`, with `ai_edge_litert` alone: no TensorFlow.

The file holds the raw detection graph (`savedmodel.runtime_graph`) as LiteRT builtins, one `serving_default`
signature whose inputs take any image size (each call resizes them and allocates the tensors again), and the
`tfdet` metadata JSON as an entry of the flatbuffer's `metadata` list (`savedmodel.litert_export`).
"""

import os
import pathlib

from savedmodel.runtime_files import METADATA_KEY, ModelFileError, Opened, first_line

SIGNATURE = "serving_default"
FILE_IDENTIFIER = b"TFL3"


def read_metadata(content, key=METADATA_KEY):
    """The text of metadata entry `key` of a .tflite flatbuffer's `content` (bytes), or None without one."""
    model = _litert("schema_py_generated").Model.GetRootAs(content, 0)
    for i in range(model.MetadataLength()):
        entry = model.Metadata(i)
        if entry.Name() == key.encode():
            return model.Buffers(entry.Buffer()).DataAsNumpy().tobytes().decode("utf-8")
    return None


def open_litert(path):
    """`path` opened by LiteRT's interpreter (`savedmodel.runtime_files.Opened`); float32 only."""
    litert = _litert("interpreter")
    content = pathlib.Path(path).read_bytes()
    if content[4:8] != FILE_IDENTIFIER:
        raise ModelFileError(f"{path}: LiteRT cannot load it (not a .tflite flatbuffer)")
    try:
        interpreter = litert.Interpreter(model_content=content, num_threads=_cpu_count())
        runner = interpreter.get_signature_runner(SIGNATURE)
    except (ValueError, RuntimeError) as error:
        raise ModelFileError(f"{path}: LiteRT cannot load it ({first_line(error)})") from None
    inputs = list(runner.get_input_details())

    def compile(precision):
        if precision != "float32":
            raise ModelFileError(f"{path}: precision {precision!r} is not one this LiteRT export computes in")

        def run(feeds):
            return runner(**{name: feeds[name] for name in inputs})

        return run, precision

    return Opened(read_metadata(content), compile)


def _litert(module):
    try:
        return __import__(f"ai_edge_litert.{module}", fromlist=["_"])
    except ImportError:
        raise ModelFileError("the litert runtime is not installed: pip install ai-edge-litert") from None


def _cpu_count():
    """The CPUs this process may run on: LiteRT's interpreter uses one thread unless told otherwise."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
