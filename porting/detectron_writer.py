"""Keras variables -> a Detectron `.pkl` that Detectron itself loads: `{'blobs', 'cfg'}`, protocol 2.

Blob names and Caffe2 layouts come from the same rules as loading (`model_blobs`). Arrays are
pickled under numpy 1.x's module names (`numpy.core.multiarray`), which Detectron's Python 2 /
numpy 1.x world can import and numpy 2 still reads, instead of numpy 2's `numpy._core`.
"""

import io
import pickle

import numpy as np

from tfdet.modeling.detectron_names import model_blobs


class _Numpy1Pickler(pickle._Pickler):
    """Protocol-2 pickler writing numpy 2's `numpy._core.*` globals as numpy 1.x `numpy.core.*`."""

    def save_global(self, obj, name=None):
        module = getattr(obj, "__module__", "") or ""
        if module.startswith("numpy._core"):
            self.write(pickle.GLOBAL + bytes("numpy.core" + module[len("numpy._core") :], "utf-8") + b"\n")
            self.write(bytes(name or obj.__qualname__, "utf-8") + b"\n")
            self.memoize(obj)
            return
        super().save_global(obj, name)


def model_to_blobs(model, mask_head="", preserved=None):
    """{Detectron blob name: float32 array in Caffe2 layout} of every variable, plus `preserved` blobs."""
    blobs = dict(preserved or {})
    for name, variable, to_caffe2, _ in model_blobs(model, mask_head):
        blobs[name] = np.ascontiguousarray(to_caffe2(np.asarray(variable.numpy())), dtype=np.float32)
    return blobs


def write_detectron_pkl(path, blobs, cfg_text):
    """Write `{'blobs': blobs, 'cfg': cfg_text}` as Detectron's `save_object` does (protocol 2)."""
    buffer = io.BytesIO()
    _Numpy1Pickler(buffer, protocol=2).dump({"blobs": blobs, "cfg": cfg_text})
    with open(path, "wb") as f:
        f.write(buffer.getvalue())
