"""Parse the YAML config string embedded in trained Detectron weight files, safely.

Detectron saves ``yaml.dump(cfg)`` of its ``AttrDict`` config, so the text carries Python tags:
``!!python/object/new:detectron.utils.collections.AttrDict`` (with ``dictitems:`` / ``state:``),
``!!python/tuple``, ``!!python/unicode``, ``!!python/str``, and numpy arrays such as ``PIXEL_MEANS``
as ``!!python/object/apply:numpy.core.multiarray._reconstruct``.  ``yaml.safe_load`` refuses
those tags and ``yaml.unsafe_load`` would import and run code, so :class:`EmbeddedCfgLoader` (a
``yaml.SafeLoader``) maps every ``!!python/...`` tag (and any other unknown tag) to plain data,
never importing or constructing an object:

* ``object/new:X`` / ``object/apply:X`` / ``object:X`` with ``dictitems`` -> ``dict`` (AttrDict;
  ``state`` such as ``__immutable__`` is dropped); with ``listitems`` -> ``list``; otherwise the
  node's own mapping / list / string.
* ``tuple`` -> ``tuple``; ``unicode`` / ``str`` -> ``str``; ``bytes`` -> ``bytes`` (base64);
  ``int`` / ``long`` / ``float`` / ``bool`` / ``none`` -> the YAML scalar; ``name:X`` /
  ``module:X`` -> the string ``"X"``.
* numpy arrays (``_reconstruct``) -> **nested plain list** of numbers, decoded from the raw bytes
  with the recorded dtype/shape (only bool/int/uint/float dtypes); anything not decodable
  -> ``None``.  numpy scalars -> a Python number (or ``None``); ``numpy.dtype`` -> its string
  (e.g. ``'<f8'``).
"""

from __future__ import annotations

import base64
import re

import numpy as np
import yaml

__all__ = ["EmbeddedCfgLoader", "parse_embedded_cfg", "bbox_reg_weights_from_cfg"]

_PY = "tag:yaml.org,2002:python/"
_DTYPE_RE = re.compile(r"^[<>|=]?[biuf]\d{1,2}$")
_RECONSTRUCT = {"numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct"}
_SCALAR = {"numpy.core.multiarray.scalar", "numpy._core.multiarray.scalar"}


class _Dtype(str):
    """A dtype descriptor string produced from a ``numpy.dtype`` tag (marks it for decoding)."""


def _raw_bytes(data):
    if isinstance(data, (bytes, bytearray)):
        return bytes(data)
    if isinstance(data, str):
        # Python-2 yaml writes ASCII-only byte strings as plain str and UTF-8-decodable ones as
        # !!python/str; encoding back with UTF-8 restores the original bytes in both cases.
        return data.encode("utf-8")
    return None


def _np_dtype(desc):
    if not isinstance(desc, str) or not _DTYPE_RE.match(desc):
        return None
    return np.dtype(desc)


def _decode_array(data):
    """``_reconstruct`` node data -> nested list, or None when it is not a plain numeric array."""
    try:
        state = data.get("state") if isinstance(data, dict) else None
        if not isinstance(state, (list, tuple)) or len(state) != 5:
            return None
        _, shape, desc, fortran, raw = state
        dtype, raw = _np_dtype(desc), _raw_bytes(raw)
        if dtype is None or raw is None or not isinstance(shape, (list, tuple)):
            return None
        shape = tuple(int(s) for s in shape)
        if len(raw) != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
            return None
        return np.frombuffer(raw, dtype=dtype).reshape(shape, order="F" if fortran else "C").tolist()
    except (TypeError, ValueError):
        return None


def _decode_scalar(data):
    args = data.get("args") if isinstance(data, dict) else data
    if not isinstance(args, (list, tuple)) or len(args) != 2:
        return None
    dtype, raw = _np_dtype(args[0]), _raw_bytes(args[1])
    if dtype is None or raw is None or len(raw) != dtype.itemsize:
        return None
    return np.frombuffer(raw, dtype=dtype)[0].item()


def _dtype_desc(data):
    args = data.get("args") if isinstance(data, dict) else data
    state = data.get("state") if isinstance(data, dict) else None
    if not isinstance(args, (list, tuple)) or not args or not isinstance(args[0], str):
        return None
    desc = args[0]
    if isinstance(state, (list, tuple)) and len(state) > 1 and state[1] in ("<", ">", "|", "="):
        desc = state[1] + desc.lstrip("<>|=")
    return _Dtype(desc)


def _plain(loader, node):
    """Plain data of a node, whatever its tag: mapping -> dict, sequence -> list, scalar -> str."""
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)


def _construct_python(loader, suffix, node):
    kind, _, target = suffix.partition(":")
    if kind == "tuple":
        return tuple(loader.construct_sequence(node, deep=True))
    if kind in ("unicode", "str"):
        return loader.construct_scalar(node)
    if kind == "bytes":
        return base64.decodebytes(loader.construct_scalar(node).encode("ascii"))
    if kind in ("int", "long"):
        return loader.construct_yaml_int(node)
    if kind == "float":
        return loader.construct_yaml_float(node)
    if kind == "bool":
        return loader.construct_yaml_bool(node)
    if kind == "none":
        return None
    if kind in ("name", "module"):
        return target
    data = _plain(loader, node)
    if kind in ("object/new", "object/apply", "object"):
        if target in _RECONSTRUCT:
            return _decode_array(data)
        if target in _SCALAR:
            return _decode_scalar(data)
        if target == "numpy.dtype":
            return _dtype_desc(data)
        if isinstance(data, dict):
            if "dictitems" in data and isinstance(data["dictitems"], dict):
                return dict(data["dictitems"])
            if "listitems" in data and isinstance(data["listitems"], list):
                return list(data["listitems"])
    return data


def _construct_unknown(loader, suffix, node):
    return _plain(loader, node)


class EmbeddedCfgLoader(yaml.SafeLoader):
    """SafeLoader that turns Python-object tags into plain data (never imports anything)."""


EmbeddedCfgLoader.add_multi_constructor(_PY, _construct_python)
# Any other unknown tag (registered after the python/ prefix, which is matched first).
EmbeddedCfgLoader.add_multi_constructor("", _construct_unknown)


def _plainify(obj):
    if isinstance(obj, dict):
        return {k: _plainify(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_plainify(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_plainify(v) for v in obj)
    if isinstance(obj, _Dtype):
        return str(obj)
    return obj


def parse_embedded_cfg(text) -> dict:
    """The ``cfg`` YAML string of a trained Detectron file -> nested plain dicts."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8")
    try:
        data = yaml.load(text, Loader=EmbeddedCfgLoader)  # noqa: S506 (loader is safe)
    except yaml.YAMLError as e:
        raise ValueError(f"embedded cfg is not valid YAML: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"embedded cfg is a {type(data).__name__}, expected a mapping")
    return _plainify(data)


def bbox_reg_weights_from_cfg(cfg_dict) -> tuple[float, float, float, float]:
    """``MODEL.BBOX_REG_WEIGHTS`` of a saved cfg, as in Detectron's ``configure_bbox_reg_weights``.

    Files saved before the key existed were trained with box-target mean/std normalization and
    Detectron forces ``(1., 1., 1., 1.)`` for inference on them (detectron/utils/net.py).
    """
    model = (cfg_dict or {}).get("MODEL")
    if not isinstance(model, dict) or "BBOX_REG_WEIGHTS" not in model:
        return (1.0, 1.0, 1.0, 1.0)
    weights = tuple(float(w) for w in model["BBOX_REG_WEIGHTS"])
    if len(weights) != 4:
        raise ValueError(f"MODEL.BBOX_REG_WEIGHTS must have 4 values, got {weights!r}")
    return weights
