"""Safe reading of Detectron .pkl weight files and their embedded YAML cfg.

Every file is built inside the test: Python-3 pickles (protocols 2-5), numpy-1.x module paths
(rewritten from numpy 2.x streams), a hand-assembled Python-2 opcode stream, malicious pickles
whose payload would create a marker file, and broken files.
"""

import base64
import collections
import os
import pickle
import pickletools
import subprocess
import zipfile

import numpy as np
import pytest

import porting
from porting import (
    UnsafeWeightFileError,
    WeightFileError,
    bbox_reg_weights_from_cfg,
    load_blobs,
    parse_embedded_cfg,
    read_weight_file,
)
from porting.pickle_reader import ALLOWED_GLOBALS
from support.detectron_fixtures import Py2Writer

PIXEL_MEANS = np.array([[[102.9801, 115.9465, 122.7717]]])


def _yaml_cfg(pixel_means_bytes: bytes, marker) -> str:
    """A Detectron-style ``yaml.dump(cfg)`` snippet (Python-2 era tags) plus two hostile tags."""
    b64 = base64.b64encode(pixel_means_bytes).decode("ascii")
    return f"""!!python/object/new:detectron.utils.collections.AttrDict
dictitems:
  MODEL: !!python/object/new:detectron.utils.collections.AttrDict
    dictitems:
      BBOX_REG_WEIGHTS: !!python/tuple [10.0, 10.0, 5.0, 5.0]
      CONV_BODY: !!python/unicode 'FPN.add_fpn_ResNet50_conv5_body'
      MASK_ON: true
      NUM_CLASSES: 81
      TYPE: generalized_rcnn
    state:
      __immutable__: true
  PIXEL_MEANS: !!python/object/apply:numpy.core.multiarray._reconstruct
    args:
    - &id001 !!python/name:numpy.ndarray ''
    - !!python/tuple [0]
    - b
    state: !!python/tuple
    - 1
    - !!python/tuple [1, 1, 3]
    - !!python/object/apply:numpy.dtype
      args: [f8, 0, 1]
      state: !!python/tuple [3, <, null, null, null, -1, -1, 0]
    - false
    - !!binary |
      {b64}
  TEST: !!python/object/new:detectron.utils.collections.AttrDict
    dictitems:
      NMS: 0.5
      SCALE: 800
      SCALES: !!python/tuple [800]
    state:
      __immutable__: true
  EVIL: !!python/object/apply:os.system ['touch {marker}']
  EVIL_NAME: !!python/name:os.system ''
  OTHER: !custom {{a: 1}}
state:
  __immutable__: true
"""


# --------------------------------------------------------------------------- stream helpers


def _rename_numpy_core(data: bytes) -> bytes:
    """Rewrite a numpy-2.x pickle as numpy 1.x writes it (``numpy._core`` -> ``numpy.core``).

    Works at any protocol: re-emits the opcodes, dropping FRAMEs (optional for unpicklers) so the
    changed string lengths stay consistent.
    """
    ops = list(pickletools.genops(data))
    out = bytearray()
    for i, (op, arg, pos) in enumerate(ops):
        end = ops[i + 1][2] if i + 1 < len(ops) else len(data)
        if op.name == "FRAME":
            continue
        if op.name == "GLOBAL" and arg.startswith("numpy._core"):
            mod, name = arg.split(" ")
            out += b"c" + mod.replace("numpy._core", "numpy.core").encode() + b"\n" + name.encode() + b"\n"
        elif op.name == "SHORT_BINUNICODE" and arg.startswith("numpy._core"):
            new = arg.replace("numpy._core", "numpy.core").encode()
            out += b"\x8c" + bytes([len(new)]) + new
        else:
            out += data[pos:end]
    return bytes(out)


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


def _imagenet_blobs(rng):
    shapes = {
        "conv1_w": (64, 3, 7, 7),
        "conv1_b": (64,),
        "res_conv1_bn_s": (64,),
        "res_conv1_bn_b": (64,),
        "res2_0_branch2a_w": (64, 64, 1, 1),
        "res2_0_branch2a_b": (64,),
        "res2_0_branch2a_bn_s": (64,),
        "res2_0_branch1_w": (256, 64, 1, 1),
        "fc1000_w": (1000, 2048),
        "fc1000_b": (1000,),
    }
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}


def _assert_same(blobs, expected):
    assert set(blobs) == set(expected)
    for k, v in expected.items():
        assert blobs[k].dtype == np.float32 and blobs[k].shape == v.shape, k
        np.testing.assert_array_equal(blobs[k], v.astype(np.float32), err_msg=k)


# --------------------------------------------------------------------------- good files


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
@pytest.mark.parametrize("numpy1", [False, True])
def test_flat_imagenet_file_python3(tmp_path, rng, protocol, numpy1):
    blobs = _imagenet_blobs(rng)
    data = pickle.dumps(blobs, protocol=protocol)
    if numpy1:
        data = _rename_numpy_core(data)
        assert b"numpy.core.multiarray" in data or b"numpy.core.numeric" in data
        assert b"numpy._core" not in data
    path = _write(tmp_path / "R-50.pkl", data)
    _assert_same(load_blobs(path), blobs)
    wf = read_weight_file(path)
    assert wf.cfg_text is None and wf.extras == {}


@pytest.mark.parametrize("protocol", [2, 5])
def test_bytes_keys_ordered_dict_dtypes_and_extras(tmp_path, rng, protocol):
    f64 = rng.standard_normal((3, 4))
    fortran = np.asfortranarray(rng.standard_normal((2, 5)).astype(np.float32))
    ints = np.arange(7, dtype=np.int32)
    big = rng.standard_normal(4).astype(">f4")
    raw = collections.OrderedDict(
        [
            (b"conv1_w", f64),  # bytes key: _codecs.encode at protocol 2
            (b"fort_w", fortran),
            ("idx", ints),
            ("big_b", big),
            ("empty_b", np.zeros((0, 4), np.float32)),  # empty data: builtins.bytes() at protocol 2
            ("lr", np.float32(0.02)),
            ("weight_order", [b"conv1_w", "fort_w"]),
            ("unused", None),
        ]
    )
    data = pickle.dumps({"blobs": raw, "cfg": b"MODEL: {NUM_CLASSES: 81}\n"}, protocol=protocol)
    if protocol == 2:
        assert b"_codecs" in data and b"OrderedDict" in data
    wf = read_weight_file(_write(tmp_path / "m.pkl", data))
    assert list(wf.blobs) == ["conv1_w", "fort_w", "idx", "big_b", "empty_b"]
    np.testing.assert_array_equal(wf.blobs["conv1_w"], f64.astype(np.float32))
    assert wf.blobs["conv1_w"].dtype == np.float32
    np.testing.assert_array_equal(wf.blobs["fort_w"], fortran)
    assert wf.blobs["idx"].dtype == np.int32
    np.testing.assert_array_equal(wf.blobs["idx"], ints)
    np.testing.assert_array_equal(wf.blobs["big_b"], big.astype(np.float32))
    assert wf.blobs["empty_b"].shape == (0, 4)
    assert all(v.flags.writeable for v in wf.blobs.values())
    assert wf.extras == {"lr": np.float32(0.02), "weight_order": [b"conv1_w", "fort_w"], "unused": None}
    assert wf.cfg_text == "MODEL: {NUM_CLASSES: 81}\n"


def test_python2_trained_file_with_embedded_cfg(tmp_path, rng):
    marker = tmp_path / "yaml_payload_ran"
    blobs = _imagenet_blobs(rng)
    blobs["cls_score_w"] = rng.standard_normal((81, 1024)).astype(np.float32)
    blobs["bbox_pred_w_momentum"] = rng.standard_normal((324, 1024)).astype(np.float32)
    blobs["conv1_w"] = rng.standard_normal((64, 3, 7, 7))  # float64 in the file -> float32
    cfg_text = _yaml_cfg(PIXEL_MEANS.tobytes(), marker)
    py2 = {
        b"blobs": {k.encode(): v for k, v in blobs.items()} | {b"lr": np.float32(0.01), b"gone": None},
        b"cfg": cfg_text.encode(),
    }
    data = Py2Writer().dumps(py2)
    assert b"numpy.core.multiarray" in data and b"_codecs" not in data
    path = _write(tmp_path / "model_final.pkl", data)

    wf = read_weight_file(path)
    _assert_same(wf.blobs, blobs)
    assert wf.extras == {"lr": np.float32(0.01), "gone": None}
    assert wf.cfg_text == cfg_text

    cfg = wf.cfg()
    assert not marker.exists()
    assert cfg["MODEL"] == {
        "BBOX_REG_WEIGHTS": (10.0, 10.0, 5.0, 5.0),
        "CONV_BODY": "FPN.add_fpn_ResNet50_conv5_body",
        "MASK_ON": True,
        "NUM_CLASSES": 81,
        "TYPE": "generalized_rcnn",
    }
    assert cfg["PIXEL_MEANS"] == PIXEL_MEANS.tolist()
    assert cfg["TEST"] == {"NMS": 0.5, "SCALE": 800, "SCALES": (800,)}
    assert cfg["EVIL"] == ["touch " + str(marker)] and cfg["EVIL_NAME"] == "os.system"
    assert cfg["OTHER"] == {"a": 1}
    assert "state" not in cfg and "dictitems" not in cfg
    assert bbox_reg_weights_from_cfg(cfg) == (10.0, 10.0, 5.0, 5.0)


def test_python2_unicode_keys_and_scalars(tmp_path):
    data = Py2Writer().dumps({"conv1_w": np.ones((2, 2), np.float32), b"x_b": np.zeros(3, ">f8"),
                               b"it": 7, b"pi": 3.25, b"name": b"caf\xe9"})
    wf = read_weight_file(_write(tmp_path / "p.pkl", data))
    assert set(wf.blobs) == {"conv1_w", "x_b"} and wf.blobs["x_b"].dtype == np.float32
    assert wf.extras == {"it": 7, "pi": 3.25, "name": "caf\xe9"}  # py2 str -> latin1 str


def test_embedded_cfg_python3_yaml_dump_and_defaults():
    yaml = pytest.importorskip("yaml")
    text = yaml.dump({"MODEL": {"NUM_CLASSES": 81}, "PIXEL_MEANS": PIXEL_MEANS,
                      "S": np.float32(1.5), "T": (1, 2)})
    assert "numpy._core.multiarray._reconstruct" in text
    cfg = parse_embedded_cfg(text)
    assert cfg == {"MODEL": {"NUM_CLASSES": 81}, "PIXEL_MEANS": PIXEL_MEANS.tolist(), "S": 1.5, "T": (1, 2)}
    assert bbox_reg_weights_from_cfg(cfg) == (1.0, 1.0, 1.0, 1.0)  # old file: key absent
    assert bbox_reg_weights_from_cfg({}) == (1.0, 1.0, 1.0, 1.0)
    assert bbox_reg_weights_from_cfg({"MODEL": {"BBOX_REG_WEIGHTS": [1, 2, 3, 4]}}) == (1.0, 2.0, 3.0, 4.0)
    # An undecodable array becomes None, never an object.
    bad = text.replace("f8", "O8")
    assert parse_embedded_cfg(bad)["PIXEL_MEANS"] is None
    with pytest.raises(ValueError):
        parse_embedded_cfg("- a\n- b\n")


# --------------------------------------------------------------------------- malicious files


class _Payload:
    def __init__(self, func, args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def _malicious(marker):
    return {
        "system": (os.system, (f"touch {marker}",)),
        "eval": (eval, (f"open({str(marker)!r}, 'w')",)),
        "popen": (subprocess.Popen, (["touch", str(marker)],)),
        "getattr": (getattr, ("abc", "upper")),  # refused even though harmless here
        "numpy.load": (np.load, (str(marker),)),
        "exec": (exec, (f"open({str(marker)!r}, 'w')",)),
    }


@pytest.mark.parametrize("kind", ["system", "eval", "popen", "getattr", "numpy.load", "exec"])
@pytest.mark.parametrize("protocol", [2, 4])
def test_malicious_pickles_are_refused_before_running(tmp_path, rng, kind, protocol):
    marker = tmp_path / "payload_ran"
    func, args = _malicious(marker)[kind]
    good = {"conv1_w": rng.standard_normal((4, 3)).astype(np.float32)}
    obj = {"blobs": dict(good, evil=_Payload(func, args)), "cfg": "x: 1"}
    path = _write(tmp_path / "evil.pkl", pickle.dumps(obj, protocol=protocol))
    with pytest.raises(UnsafeWeightFileError) as e:
        load_blobs(path)
    msg = str(e.value)
    # Named as written in the stream, plus the Python 3 spelling when the stream used the Python 2
    # one (at protocol 2 Python 3 writes builtins.eval as __builtin__.eval, subprocess.Popen as
    # commands.Popen).
    assert "refused global '" in msg and f"'{func.__module__}.{func.__name__}'" in msg
    assert str(path) in msg
    assert not marker.exists()


def test_os_system_named_in_py2_stream(tmp_path):
    marker = tmp_path / "payload_ran"
    w = Py2Writer()
    w.glob("os", "system")
    w.str_(f"touch {marker}".encode())
    w.out += b"\x85R."
    path = _write(tmp_path / "evil.pkl", bytes(w.out))
    with pytest.raises(UnsafeWeightFileError, match=r"'os\.system'"):
        read_weight_file(path)
    assert not marker.exists()


def test_allowed_callables_cannot_be_rewired(tmp_path):
    # GLOBAL _codecs.encode, then BUILD with slot state {'_fn': ...}: must fail, not rewire.
    data = b"\x80\x02c_codecs\nencode\nN}U\x03_fnK\x01s\x86b."
    with pytest.raises(WeightFileError, match="corrupt pickle"):
        read_weight_file(_write(tmp_path / "b.pkl", data))
    # ndarray is an inert token: calling it is refused.
    data = b"\x80\x02cnumpy\nndarray\nK\x05\x85R."
    with pytest.raises(WeightFileError, match="corrupt pickle"):
        read_weight_file(_write(tmp_path / "c.pkl", data))
    assert ("numpy", "ndarray") in ALLOWED_GLOBALS and ("builtins", "eval") not in ALLOWED_GLOBALS


def test_persistent_ids_point_to_pth_reader(tmp_path):
    class P(pickle.Pickler):
        def persistent_id(self, obj):
            return "storage" if isinstance(obj, np.ndarray) else None

    import io

    buf = io.BytesIO()
    P(buf, protocol=2).dump({"w": np.ones(2)})
    with pytest.raises(WeightFileError, match=r"persistent ids.*\.pth reader"):
        read_weight_file(_write(tmp_path / "t.pkl", buf.getvalue()))


# --------------------------------------------------------------------------- broken files


def _good_bytes(rng):
    return pickle.dumps({"blobs": _imagenet_blobs(rng), "cfg": "a: 1"}, protocol=2)


@pytest.mark.parametrize(
    "name, make, expected",
    [
        ("empty.pkl", lambda rng, p: b"", "empty file"),
        ("trunc.pkl", lambda rng, p: (lambda b: b[: len(b) // 2])(_good_bytes(rng)), "truncated pickle"),
        ("trunc2.pkl", lambda rng, p: _good_bytes(rng)[:-1], "truncated pickle"),
        ("random.pkl", lambda rng, p: b"\x13" + rng.bytes(1000), "not a pickle file"),
        ("noise.pkl", lambda rng, p: b"\x80\x02" + rng.bytes(1000), "pickle"),
        ("text.pkl", lambda rng, p: b"MODEL:\n  NUM_CLASSES: 81\n", "not a pickle file"),
        ("list.pkl", lambda rng, p: pickle.dumps([np.ones(3)], protocol=2), "top level of the pickle is a list"),
        ("blobs.pkl", lambda rng, p: pickle.dumps({"blobs": [1, 2]}, protocol=2), "'blobs' entry is a list"),
        ("key.pkl", lambda rng, p: pickle.dumps({3: np.ones(2)}, protocol=2), "blob name 3 is a int"),
        ("proto0.pkl", lambda rng, p: pickle.dumps({"a": 1}, protocol=0), "not a pickle file"),
    ],
)
def test_broken_files_give_clear_errors(tmp_path, rng, name, make, expected):
    path = _write(tmp_path / name, make(rng, tmp_path))
    with pytest.raises(WeightFileError) as e:
        read_weight_file(path)
    assert expected in str(e.value) and str(path) in str(e.value)
    assert not isinstance(e.value, UnsafeWeightFileError)


def test_zip_and_missing_files(tmp_path):
    zpath = tmp_path / "model.pth"
    with zipfile.ZipFile(zpath, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"a": 1}, protocol=2))
    with pytest.raises(WeightFileError, match=r"zip archive.*\.pth reader"):
        load_blobs(zpath)
    with pytest.raises(WeightFileError, match="cannot open"):
        load_blobs(tmp_path / "nope.pkl")
    legacy = pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2)
    with pytest.raises(WeightFileError, match="legacy"):
        load_blobs(_write(tmp_path / "legacy.pth", legacy))


def test_public_exports():
    for name in ("load_blobs", "read_weight_file", "WeightFile", "WeightFileError",
                 "UnsafeWeightFileError", "parse_embedded_cfg", "bbox_reg_weights_from_cfg"):
        assert hasattr(porting, name)
