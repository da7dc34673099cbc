"""Safe reader of legacy Detectron (Caffe2) ``.pkl`` weight files.

Weight files are untrusted input (docs/design.md decision 6). ``pickle`` can call any importable
function while loading, so this reader uses a *restricted unpickler*: every global a stream asks
for goes through :meth:`RestrictedUnpickler.find_class`, which answers from a fixed allow-list of
the globals that Detectron files (Python-2 and Python-3 pickles, numpy 1.x and 2.x) actually
contain, and raises :class:`UnsafeWeightFileError` for anything else *before* it can be called.

Allow-list (``module.name`` as it appears in the stream -> what the unpickler gets back):

* ``numpy.core.multiarray._reconstruct`` / ``numpy._core.multiarray._reconstruct`` (numpy 1.x /
  2.x spelling): how every ``ndarray`` is pickled at protocols 2-4.  Guarded: the subtype must be
  ``numpy.ndarray`` and the initial shape must be empty (numpy always writes ``(0,)``); the data
  then arrives through ``ndarray.__setstate__``.
* ``numpy.ndarray``: the subtype argument of ``_reconstruct``.  Returned as an inert, non-callable
  token, so a stream cannot call ``ndarray(...)`` itself.
* ``numpy.dtype``: dtype of every array / scalar.
* ``numpy.core.multiarray.scalar`` / ``numpy._core.multiarray.scalar``: numpy scalars
  (e.g. ``lr``-style values).  Guarded: no object dtypes, data must be bytes.
* ``numpy.core.numeric._frombuffer`` / ``numpy._core.numeric._frombuffer``: how numpy pickles
  contiguous arrays at protocol 5.  Re-implemented here (``np.frombuffer`` + ``reshape``).
* ``_codecs.encode``: Python 3 writes ``bytes`` at protocol 2 as ``_codecs.encode(str, 'latin1')``
  (array data, byte-string keys).  Guarded: only ``str`` input and latin-1.
* ``builtins.bytes`` / ``__builtin__.bytes``: Python 3 writes *empty* ``bytes`` at protocol 2 as
  ``bytes()`` (e.g. the data of a zero-size array).  Guarded: no arguments allowed.
* ``collections.OrderedDict``: blob dicts are sometimes ordered dicts.

No other builtins (``set``, ``frozenset``, ``getattr``, ``eval`` ...) are admitted: Detectron files
do not need them.  The callables handed to the stream are frozen objects created per load, so a
stream cannot re-wire them with ``BUILD``.
"""

from __future__ import annotations

import _compat_pickle
import collections
import contextlib
import dataclasses
import os
import pickle
from typing import Any

import numpy as np
from tqdm import tqdm

__all__ = [
    "WeightFile",
    "WeightFileError",
    "UnsafeWeightFileError",
    "read_weight_file",
    "load_blobs",
]

# First pickled object of a legacy (non-zip) torch.save file.
TORCH_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LATIN1_NAMES = frozenset({"latin1", "latin-1", "latin_1", "iso-8859-1", "iso8859-1", "l1"})


class WeightFileError(Exception):
    """A weight file could not be read (missing, empty, truncated, not a pickle, bad layout)."""


class UnsafeWeightFileError(WeightFileError):
    """A weight file asked for a global outside the allow-list (refused before it ran)."""


@dataclasses.dataclass
class WeightFile:
    """Content of a Detectron weight file.

    blobs: blob name -> array (floating arrays as float32, integer/bool arrays unchanged).
    cfg_text: the embedded YAML config of trained files (``None`` for ImageNet files).
    extras: every non-array value (``None`` blobs, scalars, ``lr``, ``weight_order``, object or
      string arrays, unknown top-level keys of a trained file) by name.
    """

    blobs: dict[str, np.ndarray]
    cfg_text: str | None
    extras: dict[str, Any]

    def cfg(self) -> dict:
        """The embedded config as plain nested dicts (``{}`` when the file has none)."""
        from porting.embedded_cfg import parse_embedded_cfg

        return {} if self.cfg_text is None else parse_embedded_cfg(self.cfg_text)


class FrozenCallable:
    """A callable handed to the pickle stream; BUILD/setattr on it are refused."""

    __slots__ = ("_fn", "_name")

    def __init__(self, fn, name):
        object.__setattr__(self, "_fn", fn)
        object.__setattr__(self, "_name", name)

    def __call__(self, *args):
        return self._fn(*args)

    def __setattr__(self, key, value):
        raise pickle.UnpicklingError(f"cannot set attributes of {self._name}")

    __delattr__ = __setattr__

    def __setstate__(self, state):
        raise pickle.UnpicklingError(f"cannot set state of {self._name}")

    def __repr__(self):
        return f"<allowed {self._name}>"


class _NdarrayToken:
    """Stands for ``numpy.ndarray`` as the subtype argument of ``_reconstruct``; not callable."""

    __slots__ = ()

    def __setstate__(self, state):
        raise pickle.UnpicklingError("cannot set state of numpy.ndarray")

    def __repr__(self):
        return "<numpy.ndarray token>"


def _make_allowed() -> dict[tuple[str, str], Any]:
    token = _NdarrayToken()
    real_reconstruct = np._core.multiarray._reconstruct  # noqa: SLF001 (numpy 2.x location)

    def reconstruct(subtype, shape, dtype):
        if subtype is not token:
            raise pickle.UnpicklingError("_reconstruct: subtype must be numpy.ndarray")
        dims = (shape,) if isinstance(shape, int) else shape
        if not isinstance(dims, tuple) or not all(type(d) is int and d >= 0 for d in dims) or (
            dims and int(np.prod(dims)) != 0
        ):
            raise pickle.UnpicklingError(f"_reconstruct: unexpected initial shape {shape!r}")
        if isinstance(dtype, str):
            dtype = dtype.encode("latin1")
        return real_reconstruct(np.ndarray, dims, dtype)

    def scalar(dtype, data=None):
        if not isinstance(dtype, np.dtype) or dtype.hasobject:
            raise pickle.UnpicklingError("scalar: only non-object numpy dtypes are allowed")
        if isinstance(data, str):  # Python-2 str read with encoding='latin1'
            data = data.encode("latin1")
        if not isinstance(data, (bytes, bytearray)) or len(data) != dtype.itemsize:
            raise pickle.UnpicklingError("scalar: data must be bytes of the dtype's size")
        return np.frombuffer(bytes(data), dtype=dtype)[0]

    def frombuffer(buf, dtype, shape, order="C"):
        if isinstance(buf, pickle.PickleBuffer):
            buf = buf.raw()
        if not isinstance(buf, (bytes, bytearray, memoryview)):
            raise pickle.UnpicklingError("_frombuffer: buffer must be bytes")
        if not isinstance(dtype, np.dtype) or dtype.hasobject or order not in ("C", "F"):
            raise pickle.UnpicklingError("_frombuffer: bad dtype or order")
        if not isinstance(shape, tuple) or not all(type(d) is int and d >= 0 for d in shape):
            raise pickle.UnpicklingError(f"_frombuffer: bad shape {shape!r}")
        return np.frombuffer(buf, dtype=dtype).reshape(shape, order=order)

    def dtype(*args):
        return np.dtype(*args)

    def codecs_encode(obj, encoding="utf-8", errors="strict"):
        if not isinstance(obj, str) or str(encoding).lower() not in _LATIN1_NAMES:
            raise pickle.UnpicklingError("_codecs.encode: only latin-1 encoding of str is allowed")
        return obj.encode("latin1")

    def empty_bytes(*args):
        if args:
            raise pickle.UnpicklingError("bytes(): only bytes() with no arguments is allowed")
        return b""

    frozen = {
        "reconstruct": FrozenCallable(reconstruct, "numpy _reconstruct"),
        "scalar": FrozenCallable(scalar, "numpy scalar"),
        "frombuffer": FrozenCallable(frombuffer, "numpy _frombuffer"),
        "dtype": FrozenCallable(dtype, "numpy.dtype"),
        "encode": FrozenCallable(codecs_encode, "_codecs.encode"),
        "bytes": FrozenCallable(empty_bytes, "bytes"),
    }
    return {
        ("numpy.core.multiarray", "_reconstruct"): frozen["reconstruct"],
        ("numpy._core.multiarray", "_reconstruct"): frozen["reconstruct"],
        ("numpy", "ndarray"): token,
        ("numpy", "dtype"): frozen["dtype"],
        ("numpy.core.multiarray", "scalar"): frozen["scalar"],
        ("numpy._core.multiarray", "scalar"): frozen["scalar"],
        ("numpy.core.numeric", "_frombuffer"): frozen["frombuffer"],
        ("numpy._core.numeric", "_frombuffer"): frozen["frombuffer"],
        ("_codecs", "encode"): frozen["encode"],
        ("builtins", "bytes"): frozen["bytes"],
        ("__builtin__", "bytes"): frozen["bytes"],
        ("collections", "OrderedDict"): collections.OrderedDict,
    }


# The (module, name) pairs admitted; exported for documentation and tests.
ALLOWED_GLOBALS = frozenset(_make_allowed())


def _python3_name(module, name) -> str:
    """The Python 3 spelling of a Python 2 global (for messages only; never imported)."""
    key = (module, name)
    if key in _compat_pickle.NAME_MAPPING:
        module, name = _compat_pickle.NAME_MAPPING[key]
    elif module in _compat_pickle.IMPORT_MAPPING:
        module = _compat_pickle.IMPORT_MAPPING[module]
    return f"{module}.{name}"


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickler that answers globals from the allow-list only (plus `extra_globals`, for .pth files)."""

    # What the refused file was expected to hold, for the refusal message.
    expected_contents = "Detectron files only contain dicts, strings, numbers and numpy arrays"

    def __init__(self, file, path: str, extra_globals=None):
        super().__init__(file, encoding="latin1")
        self._path = path
        self._allowed = {**_make_allowed(), **(extra_globals or {})}

    def find_class(self, module, name):
        try:
            return self._allowed[(module, name)]
        except (KeyError, TypeError):
            shown = f"'{module}.{name}'"
            py3 = _python3_name(module, name)
            if py3 != f"{module}.{name}":
                shown += f" (Python 3 name '{py3}')"
            raise UnsafeWeightFileError(
                f"{self._path}: refused global {shown}: not in the weight-file allow-list "
                f"({self.expected_contents}); nothing from the file was executed"
            ) from None

    def persistent_load(self, pid):
        raise WeightFileError(
            f"{self._path}: the pickle uses persistent ids (a PyTorch-style checkpoint); "
            "Detectron .pkl files never do. Read .pth files with the .pth reader "
            "(porting.read_pth, python -m porting maskrcnn-benchmark)."
        )


def file_error(path, what):
    """The one-line WeightFileError naming `path`."""
    return WeightFileError(f"{path}: {what}")




@contextlib.contextmanager
def opened_with_head(path, noun, expected, head_size):
    """(file, its first `head_size` bytes); one-line errors when `path` (a `noun`) cannot be opened or is
    empty (not `expected`)."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise file_error(path, f"cannot open {noun} ({e.strerror or e})") from None
    with f:
        head = f.read(head_size)
        if not head:
            raise file_error(path, f"empty file (0 bytes), not {expected}")
        yield f, head


def _unpickle(path: str, progress=False) -> Any:
    with opened_with_head(path, "weight file", "a pickle file", 4) as (f, head):
        if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
            raise file_error(
                path,
                "is a zip archive, not a pickle file (a PyTorch .pth checkpoint? "
                "those need the .pth reader: porting.read_pth)",
            )
        if len(head) < 2 or head[0] != 0x80 or not 2 <= head[1] <= 5:
            raise file_error(
                path,
                f"not a pickle file: expected a protocol 2-5 pickle header (b'\\x80\\x02'..b'\\x80\\x05'), "
                f"file starts with {head!r}",
            )
        f.seek(0)
        if not progress:
            return load_restricted(RestrictedUnpickler(f, path), path)
        size = os.fstat(f.fileno()).st_size
        with tqdm.wrapattr(f, "read", total=size, desc=f"reading {os.path.basename(path)}", unit="B", unit_scale=True,
                           unit_divisor=1024, leave=False, disable=None) as counted:
            return load_restricted(RestrictedUnpickler(counted, path), path)


def load_restricted(unpickler: RestrictedUnpickler, path: str) -> Any:
    """`unpickler.load()`, with every failure turned into a one-line WeightFileError naming `path`."""
    try:
        return unpickler.load()
    except WeightFileError:
        raise
    except EOFError:
        raise file_error(path, "truncated pickle (the file ends before the pickle is complete)") from None
    except pickle.UnpicklingError as e:
        msg = str(e)
        if "truncated" in msg:
            raise file_error(path, f"truncated pickle ({msg})") from None
        raise file_error(path, f"corrupt pickle ({msg})") from None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError,
            UnicodeError, MemoryError, RecursionError) as e:
        raise file_error(path, f"corrupt pickle ({type(e).__name__}: {e})") from None


def _key(path, k) -> str:
    if isinstance(k, str):
        return k
    if isinstance(k, (bytes, bytearray)):
        return bytes(k).decode("latin1")
    raise file_error(path, f"blob name {k!r} is a {type(k).__name__}, expected a string")


def _as_blob(value):
    """The array to keep in ``blobs``, or None when the value belongs to ``extras``."""
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf":
        return None
    if value.dtype.kind == "f":
        value = value.astype(np.float32, copy=False)
    elif not value.dtype.isnative:
        value = value.astype(value.dtype.newbyteorder("="))
    if not value.flags.writeable:
        value = value.copy()
    return value


def read_weight_file(path, progress=False) -> WeightFile:
    """Read a Detectron ``.pkl`` (trained ``{'blobs', 'cfg'}`` or flat ImageNet dict) safely; `progress`
    shows a bar of the bytes read on a terminal (zoo files reach 500 MB).

    Raises ``UnsafeWeightFileError`` if the file asks for a disallowed global, and
    ``WeightFileError`` for files that are missing, empty, truncated, not pickles or not laid out
    as Detectron files.  Messages always name the file.
    """
    path = os.fspath(path)
    top = _unpickle(path, progress)
    if type(top) is int and top == TORCH_LEGACY_MAGIC:
        raise file_error(path, "is a legacy (non-zip) torch.save file; use the .pth reader (porting.read_pth)")
    if not isinstance(top, dict):
        raise file_error(path, f"top level of the pickle is a {type(top).__name__}, expected a dict of blobs")
    top = {_key(path, k): v for k, v in top.items()}

    extras: dict[str, Any] = {}
    cfg_text = None
    if "blobs" in top:
        raw = top.pop("blobs")
        if not isinstance(raw, dict):
            raise file_error(path, f"'blobs' entry is a {type(raw).__name__}, expected a dict")
        cfg = top.pop("cfg", None)
        if isinstance(cfg, (bytes, bytearray)):
            cfg = bytes(cfg).decode("utf-8", errors="replace")
        if cfg is not None and not isinstance(cfg, str):
            raise file_error(path, f"'cfg' entry is a {type(cfg).__name__}, expected a YAML string")
        cfg_text = cfg
        # Other top-level keys (none in Detectron's own files) are reported, never dropped.
        extras.update(top)
    else:
        raw = top

    blobs: dict[str, np.ndarray] = {}
    for k, v in raw.items():
        name = _key(path, k)
        arr = _as_blob(v)
        if arr is None:
            extras[name] = v
        else:
            blobs[name] = arr
    return WeightFile(blobs=blobs, cfg_text=cfg_text, extras=extras)


def load_blobs(path) -> dict[str, np.ndarray]:
    """Blob name -> array of a Detectron ``.pkl`` file (see :func:`read_weight_file`)."""
    return read_weight_file(path).blobs
