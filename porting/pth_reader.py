"""Torch-free reader of PyTorch ``.pth`` checkpoints (``torch.save``'s zip and legacy formats).

Checkpoints are untrusted input (docs/design.md decision 6), so ``torch.load`` is never used and torch
is never imported. The object pickle goes through porting's restricted unpickler, extended with the
few globals that ``torch.save`` writes for tensors, each answered by our own code:

* ``torch._utils._rebuild_tensor_v2`` / ``_rebuild_tensor`` (torch < 0.4) / ``_rebuild_parameter``:
  rebuild a tensor as a numpy array from (storage, offset, size, stride), strides honoured;
* ``torch.<Type>Storage`` and ``torch.storage.UntypedStorage``: inert tokens naming a storage's
  element type, only usable inside a persistent id;
* ``torch.<dtype>`` (``torch.float32`` ...): the numpy dtype;
* ``collections.Counter``: torch's ``MultiStepLR`` keeps its milestones in one (scheduler state).

Everything the base allow-list admits (``collections.OrderedDict``, numpy arrays, dtypes and
scalars) stays admitted; any other global is refused before it runs, naming it and the file.

Formats (torch/serialization.py):

* zip (torch >= 1.6): ``<name>/data.pkl`` (persistent ids ``('storage', type, key, location,
  numel)``), raw storages ``<name>/data/<key>`` in the byte order of ``<name>/byteorder``
  (little when absent), plus version records that are not needed to read it;
* legacy (``_use_new_zipfile_serialization=False``): pickles of the magic number, the protocol
  version 1001 and a sys-info dict, then the object pickle (persistent ids ``('storage', type,
  key, location, numel, view)``), the list of storage keys, and per key an int64 element count
  followed by the raw little-endian data;
* tar (torch <= 0.1.x, 2017): refused with a message; re-save such a file with a newer PyTorch.

Tensors come back as fresh numpy arrays (C-contiguous, native byte order, writeable); bfloat16
becomes float32 (exact), a bare storage becomes its 1-D array.
"""

from __future__ import annotations

import collections
import io
import math
import os
import re
import zipfile

import numpy as np

from porting.pickle_reader import (
    TORCH_LEGACY_MAGIC,
    FrozenCallable,
    RestrictedUnpickler,
    file_error,
    load_restricted,
    opened_with_head,
)

__all__ = ["read_pth"]

_LEGACY_PROTOCOL_VERSION = 1001
_BFLOAT16 = "bfloat16"  # stored as uint16 words, widened to float32 when a tensor is built
_STORAGE_DTYPES = {
    "DoubleStorage": "f8",
    "FloatStorage": "f4",
    "HalfStorage": "f2",
    "BFloat16Storage": _BFLOAT16,
    "LongStorage": "i8",
    "IntStorage": "i4",
    "ShortStorage": "i2",
    "CharStorage": "i1",
    "ByteStorage": "u1",
    "BoolStorage": "?",
    "ComplexFloatStorage": "c8",
    "ComplexDoubleStorage": "c16",
}
_TORCH_DTYPES = {
    "float64": "f8", "double": "f8", "float32": "f4", "float": "f4", "float16": "f2", "half": "f2",
    "int64": "i8", "long": "i8", "int32": "i4", "int": "i4", "int16": "i2", "short": "i2",
    "int8": "i1", "uint8": "u1", "bool": "?", "complex64": "c8", "complex128": "c16",
}  # fmt: skip
_STORAGE_KEY = re.compile(r"^[0-9A-Za-z_]+$")



class _Inert:
    """Base of the objects a .pth pickle gets from us: fixed at creation, BUILD/setattr refused.

    (Without this a pickle could rewrite a tensor's validated size or offset through BUILD.)
    """

    __slots__ = ()

    def __init__(self, **fields):
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, key, value):
        raise AttributeError(f"cannot set attributes of {type(self).__name__}")

    __delattr__ = __setattr__

    def __setstate__(self, state):
        raise AttributeError(f"cannot set state of {type(self).__name__}")


class _StorageType(_Inert):
    """Stands for a ``torch.*Storage`` class in a persistent id; not callable."""

    __slots__ = ("name", "dtype")


class _StorageRef(_Inert):
    """A storage named by a persistent id, read once the pickle is done.

    dtype: numpy dtype code without byte order, or _BFLOAT16; view: (offset, numel) into the
    root storage for legacy storage views, else None.
    """

    __slots__ = ("key", "dtype", "numel", "view")
    __hash__ = None  # a storage is never a dict key in a checkpoint


class _TensorRef(_Inert):
    """A tensor as ``_rebuild_tensor_v2`` describes it, built into an array after unpickling."""

    __slots__ = ("storage", "offset", "size", "stride")
    __hash__ = None


def _is_count(value):
    return type(value) is int and value >= 0


def _torch_globals(path):
    """The torch globals a ``.pth`` pickle may ask for, answered by our own inert code."""

    def tensor(storage, offset, size, stride):
        if not isinstance(storage, _StorageRef):
            raise file_error(path, "corrupt pickle (a tensor's storage is not a persistent storage id)")
        size, stride = tuple(size), tuple(stride)
        if not _is_count(offset) or not all(map(_is_count, size + stride)) or len(size) != len(stride):
            raise file_error(path, f"corrupt pickle (tensor offset {offset!r}, size {size!r}, stride {stride!r})")
        return _TensorRef(storage=storage, offset=offset, size=size, stride=stride)

    def rebuild_tensor_v2(storage, offset, size, stride, requires_grad=False, backward_hooks=None, metadata=None):
        if backward_hooks:  # hooks are callables: a state dict never has any
            raise file_error(path, "corrupt pickle (a tensor carries backward hooks)")
        return tensor(storage, offset, size, stride)

    def rebuild_parameter(data, requires_grad=False, backward_hooks=None):
        if not isinstance(data, _TensorRef) or backward_hooks:
            raise file_error(path, "corrupt pickle (a parameter without a tensor, or with backward hooks)")
        return data

    allowed = {
        ("torch._utils", "_rebuild_tensor_v2"): FrozenCallable(rebuild_tensor_v2, "torch._utils._rebuild_tensor_v2"),
        ("torch._utils", "_rebuild_tensor"): FrozenCallable(tensor, "torch._utils._rebuild_tensor"),
        ("torch._utils", "_rebuild_parameter"): FrozenCallable(rebuild_parameter, "torch._utils._rebuild_parameter"),
        ("torch.storage", "UntypedStorage"): _StorageType(name="UntypedStorage", dtype="u1"),
        ("collections", "Counter"): collections.Counter,
    }
    allowed.update({("torch", name): _StorageType(name=name, dtype=code) for name, code in _STORAGE_DTYPES.items()})
    # Copies, not numpy's shared dtype singletons, since the stream may BUILD on what it gets.
    allowed.update({("torch", name): np.dtype(code, False, True) for name, code in _TORCH_DTYPES.items()})
    return allowed


class _PthUnpickler(RestrictedUnpickler):
    """The restricted unpickler plus torch's tensor globals and storage persistent ids."""

    expected_contents = ".pth checkpoints only contain dicts, lists, strings, numbers and tensors"

    def __init__(self, file, path, legacy):
        super().__init__(file, path, _torch_globals(path))
        self._legacy = legacy
        self.first_refs = {}  # storage key -> its first reference (which fixes its element type)

    def persistent_load(self, pid):
        fields = 6 if self._legacy else 5
        if not isinstance(pid, tuple) or len(pid) != fields or pid[0] != "storage":
            raise file_error(self._path, f"unexpected persistent id {pid!r:.80} (only tensor storages are read)")
        _, storage_type, key, location, numel = pid[:5]
        if not isinstance(storage_type, _StorageType):
            raise file_error(self._path, f"persistent id names {storage_type!r:.60}, not a torch storage type")
        if not isinstance(key, str) or not _STORAGE_KEY.match(key) or not isinstance(location, str):
            raise file_error(self._path, f"bad storage key {key!r:.60} or location {location!r:.60}")
        if not _is_count(numel):
            raise file_error(self._path, f"bad element count {numel!r:.60} for storage {key}")
        view = pid[5] if self._legacy else None
        if view is not None:  # legacy storage view: (view_key, offset, numel) into the root storage
            if not (isinstance(view, tuple) and len(view) == 3 and _is_count(view[1]) and _is_count(view[2])):
                raise file_error(self._path, f"bad storage view {view!r:.60}")
            view = (view[1], view[2])
        ref = _StorageRef(key=key, dtype=storage_type.dtype, numel=numel, view=view)
        self.first_refs.setdefault(key, ref)
        return ref


def _element_dtype(code, byteorder):
    """The numpy dtype of one stored element (bfloat16 as its uint16 bit pattern)."""
    return np.dtype("u2" if code == _BFLOAT16 else code).newbyteorder("<" if byteorder == "little" else ">")


def _storage_array(path, ref, raw, byteorder):
    """The 1-D array of `ref` from its storage's raw bytes (native byte order, read-only view)."""
    dtype = _element_dtype(ref.dtype, byteorder)
    if len(raw) != ref.numel * dtype.itemsize:
        raise file_error(path, f"storage {ref.key} has {len(raw)} bytes, the pickle says {ref.numel} x {dtype.itemsize}")
    flat = np.frombuffer(raw, dtype=dtype)
    if ref.view is not None:
        start, count = ref.view
        if start + count > flat.size:
            raise file_error(path, f"storage view {ref.view} lies outside storage {ref.key} ({flat.size} elements)")
        flat = flat[start : start + count]
    return flat


def _widen(array, code):
    """Native byte order; bfloat16 words become float32 (the high half of a float32)."""
    if code == _BFLOAT16:
        return (array.astype(np.uint32, order="C") << 16).view(np.float32)
    return array.astype(array.dtype.newbyteorder("="), order="C", copy=True)


def _tensor_array(path, tensor, flat):
    """A tensor's own C-contiguous array from its storage's elements, offset and strides honoured."""
    if math.prod(tensor.size) == 0:
        return _widen(np.empty(tensor.size, dtype=flat.dtype), tensor.storage.dtype)
    last = tensor.offset + sum((n - 1) * s for n, s in zip(tensor.size, tensor.stride))
    if last >= flat.size:
        raise file_error(
            path,
            f"tensor of size {tensor.size}, stride {tensor.stride}, offset {tensor.offset} reaches element "
            f"{last} of storage {tensor.storage.key}, which has {flat.size}",
        )
    view = np.lib.stride_tricks.as_strided(
        flat[tensor.offset :], shape=tensor.size, strides=[s * flat.itemsize for s in tensor.stride], writeable=False
    )
    return _widen(view, tensor.storage.dtype)


def _materialize(path, obj, storage_array):
    """Replace every tensor/storage reference inside plain containers by its numpy array."""
    seen = set()

    def convert(value):
        if isinstance(value, _TensorRef):
            return _tensor_array(path, value, storage_array(value.storage))
        if isinstance(value, _StorageRef):
            return _widen(storage_array(value), value.dtype)
        if isinstance(value, (dict, list)):
            if id(value) not in seen:
                seen.add(id(value))
                items = value.items() if isinstance(value, dict) else enumerate(value)
                for k, v in list(items):
                    value[k] = convert(v)
            return value
        if isinstance(value, tuple):
            return tuple(convert(v) for v in value)
        return value

    try:
        return convert(obj)
    except RecursionError:
        raise file_error(path, "containers nested too deeply") from None
    except (ValueError, OverflowError, MemoryError) as e:
        raise file_error(path, f"cannot build a tensor ({type(e).__name__}: {e})") from None


def _checked_name(path, name):
    """Refuse archive entry names that look like path traversal (we never extract, but say so)."""
    parts = name.replace("\\", "/").split("/")
    if name.startswith(("/", "\\")) or ".." in parts or ":" in parts[0]:
        raise file_error(path, f"refused zip entry {name!r}: absolute or '..' path (not a torch.save archive)")
    return name


def _read_zip(path):
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise file_error(path, f"not a readable zip archive, truncated or corrupt ({e})") from None
    with archive:
        names = [_checked_name(path, n) for n in archive.namelist()]
        pickles = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pickles) != 1:
            found = f"{len(pickles)} found"
            raise file_error(path, f"zip archive without exactly one <name>/data.pkl ({found}): not a torch.save file")
        prefix = pickles[0][: -len("data.pkl")]

        def record(name):
            try:
                return archive.read(prefix + name)
            except KeyError:
                raise file_error(path, f"zip archive has no {prefix + name}") from None
            except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as e:
                raise file_error(path, f"cannot read {prefix + name}: truncated or corrupt ({e})") from None

        byteorder = "little"
        if prefix + "byteorder" in names:
            byteorder = record("byteorder").decode("ascii", "replace").strip()
            if byteorder not in ("little", "big"):
                raise file_error(path, f"unknown byteorder record {byteorder!r}")
        top = load_restricted(_PthUnpickler(io.BytesIO(record("data.pkl")), path, legacy=False), path)
        cache = {}

        def storage_array(ref):
            if ref.key not in cache:
                cache[ref.key] = record(f"data/{ref.key}")
            return _storage_array(path, ref, cache[ref.key], byteorder)

        return _materialize(path, top, storage_array)


def _read_legacy(path, f):
    def load(unpickler=None):
        return load_restricted(unpickler or _PthUnpickler(f, path, legacy=True), path)

    magic = load()
    if type(magic) is not int or magic != TORCH_LEGACY_MAGIC:
        hint = " (a Detectron .pkl? read it with porting.read_weight_file)" if isinstance(magic, dict) else ""
        raise file_error(path, f"a plain pickle, not a torch.save checkpoint: no torch magic number{hint}")
    version = load()
    if type(version) is not int or version != _LEGACY_PROTOCOL_VERSION:
        raise file_error(path, f"legacy torch.save protocol {version!r:.40}, expected {_LEGACY_PROTOCOL_VERSION}")
    if not isinstance(load(), dict):
        raise file_error(path, "corrupt legacy torch.save file (its sys info is not a dict)")
    unpickler = _PthUnpickler(f, path, legacy=True)
    top = load(unpickler)
    keys = load()
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise file_error(path, "corrupt legacy torch.save file (bad storage key list)")
    raw, size = {}, os.fstat(f.fileno()).st_size
    for key in keys:  # each: int64 element count, then the little-endian elements
        if key not in unpickler.first_refs:
            raise file_error(path, f"storage {key!r:.40} is stored but no tensor refers to it")
        itemsize = _element_dtype(unpickler.first_refs[key].dtype, "little").itemsize
        head = f.read(8)
        count = int.from_bytes(head, "little", signed=True) if len(head) == 8 else -1
        if not 0 <= count * itemsize <= size - f.tell():
            raise file_error(path, f"truncated legacy torch.save file (storage {key} is incomplete)")
        raw[key] = f.read(count * itemsize)

    def storage_array(ref):
        if ref.key not in raw:
            raise file_error(path, f"storage {ref.key} is referred to but missing from the file")
        return _storage_array(path, ref, raw[ref.key], "little")

    return _materialize(path, top, storage_array)


def read_pth(path) -> dict:
    """The checkpoint saved by ``torch.save`` at `path`, as plain Python containers and numpy arrays.

    Raises ``UnsafeWeightFileError`` when the pickle asks for a global outside the allow-list and
    ``WeightFileError`` (one line, naming the file) for anything missing, truncated or corrupt.
    """
    path = os.fspath(path)
    with opened_with_head(path, "checkpoint", "a torch.save checkpoint", 512) as (f, head):
        if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
            top = _read_zip(path)
        elif len(head) > 262 and head[257:262] == b"ustar":
            raise file_error(path, "tar-format torch.save file (PyTorch 0.1.x): not supported, re-save it with a newer PyTorch")
        elif len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
            f.seek(0)
            top = _read_legacy(path, f)
        else:
            what = f"neither a zip archive nor a legacy pickle; starts with {head[:8]!r}"
            raise file_error(path, f"not a torch.save checkpoint ({what})")
    if not isinstance(top, dict):
        raise file_error(path, f"top level is a {type(top).__name__}, expected a dict (a checkpoint or a state dict)")
    return top
