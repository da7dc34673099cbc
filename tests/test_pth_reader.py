"""porting.read_pth: files written by real torch.save read without torch; hostile and broken files refused."""

import importlib.util
import io
import pickle
import sys
import tarfile
import zipfile

import numpy as np
import pytest

from porting.pickle_reader import UnsafeWeightFileError, WeightFileError
from porting.pth_reader import read_pth
from support.paths import REPO_ROOT


def _fixture_module(name):
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "tests" / "fixtures" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


expected_files = _fixture_module("make_pth_fixtures")
torch_writer = _fixture_module("torch_writer")
FIXTURES = expected_files.FIXTURES
REAL_FILES = [
    ("checkpoint_zip.pth", "checkpoint"),
    ("checkpoint_legacy.pth", "checkpoint"),
    ("state_dict_data_parallel.pth", "state_dict_data_parallel"),
]


def assert_same_content(actual, expected):
    """`actual` (read back) has exactly the flattened content `expected`; arrays bit-equal, owned, C order."""
    actual = expected_files.flatten(actual)
    assert [path for path, _ in actual] == [path for path, _ in expected]
    for (path, got), (_, want) in zip(actual, expected):
        if "array" in want:
            array = got["array"]
            assert array.dtype == want["array"].dtype and array.shape == want["array"].shape, path
            np.testing.assert_array_equal(array, want["array"], err_msg=str(path))
            assert array.flags.c_contiguous and array.flags.writeable, path
        else:
            assert got == want, path


def one_line_error(error_type, path, *fragments):
    """Read `path`, expecting `error_type` with a one-line message naming the file and `fragments`."""
    with pytest.raises(error_type) as caught:
        read_pth(path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message, message
    for fragment in fragments:
        assert fragment in message, message
    return caught.value


@pytest.mark.parametrize("name, expected", REAL_FILES)
def test_real_torch_files_read_as_torch_wrote_them(name, expected):
    assert_same_content(read_pth(FIXTURES / name), expected_files.load_expected(expected))
    assert "torch" not in sys.modules


def test_zip_and_legacy_formats_read_the_same():
    zip_file, legacy = read_pth(FIXTURES / "checkpoint_zip.pth"), read_pth(FIXTURES / "checkpoint_legacy.pth")
    assert_same_content(zip_file, expected_files.flatten(legacy))
    extra = zip_file["extra"]
    assert extra["transposed"].shape == (5, 3) and extra["sliced"].shape == (3, 3)
    assert extra["bfloat16"].dtype == np.float32 and extra["dtype"] == np.float16
    np.testing.assert_array_equal(extra["shared_view"], extra["shared_base"].reshape(-1)[2:7])


@pytest.mark.parametrize("name, expected", REAL_FILES)
@pytest.mark.parametrize("write", ["write_zip", "write_legacy"])
def test_test_writer_makes_files_read_like_torchs(tmp_path, name, expected, write):
    """The writer the porting tests use (tests/fixtures/torch_writer.py) against real torch.save files."""
    path = tmp_path / "written.pth"
    getattr(torch_writer, write)(path, read_pth(FIXTURES / name))
    assert_same_content(read_pth(path), expected_files.load_expected(expected))


def test_offsets_strides_views_and_byte_order(tmp_path, rng):
    """Layouts from the definition: element [i, j] of a tensor is storage[offset + i*stride0 + j*stride1]."""
    elements = rng.normal(size=40).astype(np.float32)
    storage = torch_writer.Storage(elements)
    Tensor = torch_writer.Tensor
    content = {
        "strided": Tensor(storage, 3, (4, 3), (2, 9)),
        "expanded": Tensor(storage, 5, (2, 3), (0, 1)),
        "int64": np.array([[-(2**40), 7]], np.int64),
        "half": rng.normal(size=(3, 2)).astype(np.float16),
    }
    strided = np.array([[elements[3 + 2 * i + 9 * j] for j in range(3)] for i in range(4)])
    for byteorder in ("little", "big"):
        torch_writer.write_zip(tmp_path / f"{byteorder}.pth", content, byteorder=byteorder)
        read = read_pth(tmp_path / f"{byteorder}.pth")
        np.testing.assert_array_equal(read["strided"], strided)
        np.testing.assert_array_equal(read["expanded"], np.stack([elements[5:8]] * 2))
        np.testing.assert_array_equal(read["int64"], content["int64"])
        np.testing.assert_array_equal(read["half"], content["half"])
        assert read["half"].dtype == np.float16 and read["int64"].dtype.isnative
    # Legacy storage views (torch < 1.0): the tensor indexes into elements [10, 30) of the storage.
    torch_writer.write_legacy(tmp_path / "view.pth", {"v": Tensor(storage, 1, (2, 3), (1, 4), view=(10, 20))})
    np.testing.assert_array_equal(read_pth(tmp_path / "view.pth")["v"], [[elements[11 + i + 4 * j] for j in range(3)] for i in range(2)])


# --------------------------------------------------------------------------- hostile files


def call_pickle(module, name, argument):
    """A protocol-2 pickle that calls module.name(argument) when loaded by a plain unpickler."""
    return b"\x80\x02" + pickle.GLOBAL + f"{module}\n{name}\n".encode() + pickle.dumps(argument, 2)[2:-1] + pickle.TUPLE1 + pickle.REDUCE + pickle.STOP


def zip_with(path, records, prefix="archive/"):
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in records.items():
            archive.writestr(prefix + name, data)
    return path


def legacy_with(path, object_pickle):
    headers = (torch_writer.LEGACY_MAGIC, 1001, {"protocol_version": 1001, "little_endian": True})
    path.write_bytes(b"".join(pickle.dumps(h, protocol=2) for h in headers) + object_pickle + pickle.dumps([], protocol=2))
    return path


CALLS = [
    ("os", "system", "touch {marker}"),
    ("posix", "system", "touch {marker}"),
    ("builtins", "eval", "open({marker!r}, 'w')"),
    ("subprocess", "Popen", ["touch", "{marker}"]),
    ("torch", "load", "{marker}"),
    ("builtins", "getattr", "{marker}"),
]


@pytest.mark.parametrize("module, name, argument", CALLS)
@pytest.mark.parametrize("container", ["zip", "legacy"])
def test_calls_in_the_pickle_are_refused_before_they_run(tmp_path, module, name, argument, container):
    marker = tmp_path / "pwned"
    if isinstance(argument, list):
        argument = [a.format(marker=str(marker)) for a in argument]
    else:
        argument = argument.format(marker=str(marker))
    payload = call_pickle(module, name, argument)
    if container == "zip":
        path = zip_with(tmp_path / "evil.pth", {"data.pkl": payload, "byteorder": b"little"})
    else:
        path = legacy_with(tmp_path / "evil.pth", payload)
    one_line_error(UnsafeWeightFileError, path, f"'{module}.{name}'", "refused global", "nothing from the file was executed")
    assert not marker.exists()


def test_the_payload_would_run_under_a_plain_unpickler(tmp_path):
    """Control for the test above: the same bytes do create the marker when nothing restricts them."""
    marker = tmp_path / "pwned"
    pickle.loads(call_pickle("builtins", "eval", f"open({str(marker)!r}, 'w').close()"))
    assert marker.exists()


def test_storage_types_are_inert_and_only_storages_are_persistent(tmp_path):
    called = b"\x80\x02ctorch\nFloatStorage\n)R."
    one_line_error(WeightFileError, zip_with(tmp_path / "a.pth", {"data.pkl": called}), "corrupt pickle")

    class ModulePid(pickle.Pickler):
        def persistent_id(self, obj):
            return ("module", "Net", "net.py", "import os") if obj == "net" else None

    buffer = io.BytesIO()
    ModulePid(buffer, protocol=2).dump({"model": "net"})
    one_line_error(WeightFileError, zip_with(tmp_path / "b.pth", {"data.pkl": buffer.getvalue()}), "unexpected persistent id")


def _ops(value):
    """The opcodes that push `value` (a protocol-2 pickle without its header and STOP)."""
    return pickle.dumps(value, protocol=2)[2:-1]


def test_tensors_cannot_be_rewritten_after_their_checks(tmp_path):
    """A BUILD after _rebuild_tensor_v2 (to grow a validated size or stride) is refused."""
    storage = pickle.MARK + _ops("storage") + pickle.GLOBAL + b"torch\nFloatStorage\n" + _ops("0") + _ops("cpu") + _ops(2)
    arguments = pickle.MARK + storage + pickle.TUPLE + pickle.BINPERSID + _ops(0) + _ops((2,)) + _ops((1,)) + pickle.NEWFALSE + pickle.EMPTY_DICT + pickle.TUPLE
    tensor = pickle.GLOBAL + b"torch._utils\n_rebuild_tensor_v2\n" + arguments + pickle.REDUCE
    data = np.array([1.5, -2.0], "<f4").tobytes()

    def checkpoint(name, after_tensor=b""):
        pickled = b"\x80\x02" + pickle.EMPTY_DICT + _ops("w") + tensor + after_tensor + pickle.SETITEM + pickle.STOP
        return zip_with(tmp_path / name, {"data.pkl": pickled, "data/0": data})

    np.testing.assert_array_equal(read_pth(checkpoint("plain.pth"))["w"], [1.5, -2.0])
    rebuilt = checkpoint("build.pth", _ops({"size": (10**9,), "stride": (0,)}) + pickle.BUILD)
    one_line_error(WeightFileError, rebuilt, "corrupt pickle", "cannot set state")


@pytest.mark.parametrize(
    "names",
    [["../../etc/data.pkl"], ["archive/data.pkl", "archive/data/../../../x"], ["/abs/data.pkl"], ["C:/x/data.pkl"]],
)
def test_path_traversal_entry_names_are_refused(tmp_path, names):
    good = pickle.dumps({"a": 1}, protocol=2)
    path = zip_with(tmp_path / "t.pth", {name: good for name in names}, prefix="")
    one_line_error(WeightFileError, path, "absolute or '..' path")


def test_storage_keys_must_be_plain_names(tmp_path):
    storage = torch_writer.Storage(np.ones(2, np.float32), key="../../etc/passwd")
    torch_writer.write_zip(tmp_path / "k.pth", {"w": torch_writer.Tensor(storage, 0, (2,), (1,))})
    one_line_error(WeightFileError, tmp_path / "k.pth", "absolute or '..' path")
    # Without the entry itself, the persistent id's key is what is refused.
    one_line_error(WeightFileError, rewrite_zip(tmp_path / "k.pth", tmp_path / "k2.pth", drop=["passwd"]), "bad storage key")


# --------------------------------------------------------------------------- broken files


def rewrite_zip(source, target, drop=(), replace=None):
    """Copy a zip archive, leaving out entries ending in `drop` and replacing others' data."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for info in old.infolist():
            if info.filename.endswith(tuple(drop)):
                continue
            data = (replace or {}).get(info.filename.split("/", 1)[1], old.read(info))
            new.writestr(info.filename, data)
    return target


def test_missing_and_short_storages(tmp_path):
    real = FIXTURES / "checkpoint_zip.pth"
    one_line_error(WeightFileError, rewrite_zip(real, tmp_path / "m.pth", drop=["/data/0"]), "no checkpoint_zip/data/0")
    short = rewrite_zip(real, tmp_path / "s.pth", replace={"data/0": b"\x00" * 8})
    one_line_error(WeightFileError, short, "storage 0 has 8 bytes")
    beyond = torch_writer.Tensor(torch_writer.Storage(np.arange(4, dtype=np.float32)), 2, (3,), (1,))
    torch_writer.write_zip(tmp_path / "b.pth", {"w": beyond})
    one_line_error(WeightFileError, tmp_path / "b.pth", "reaches element 4 of storage 0, which has 4")


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.99])
def test_truncated_files(tmp_path, fraction):
    for name in ("checkpoint_zip.pth", "checkpoint_legacy.pth"):
        data = (FIXTURES / name).read_bytes()
        path = tmp_path / name
        path.write_bytes(data[: int(len(data) * fraction)])
        one_line_error(WeightFileError, path, "truncated")


def test_legacy_storage_count_beyond_the_file(tmp_path):
    torch_writer.write_legacy(tmp_path / "c.pth", {"w": np.ones(2, np.float32)})
    data = bytearray((tmp_path / "c.pth").read_bytes())
    data[-16:-8] = (2**60).to_bytes(8, "little")  # the element count before the last storage's 8 bytes
    (tmp_path / "c.pth").write_bytes(bytes(data))
    one_line_error(WeightFileError, tmp_path / "c.pth", "truncated legacy torch.save file (storage")


def test_corrupted_storage_bytes_fail_the_zip_checksum(tmp_path):
    real = FIXTURES / "checkpoint_zip.pth"
    data = bytearray(real.read_bytes())
    with zipfile.ZipFile(real) as archive:
        header = archive.getinfo("checkpoint_zip/data/0").header_offset
    name_length, extra_length = (int.from_bytes(data[header + i : header + i + 2], "little") for i in (26, 28))
    data[header + 30 + name_length + extra_length + 5] ^= 0xFF  # a byte of the storage itself
    (tmp_path / "crc.pth").write_bytes(bytes(data))
    one_line_error(WeightFileError, tmp_path / "crc.pth", "cannot read checkpoint_zip/data/0", "corrupt")


def test_other_files_are_refused_with_what_they_are(tmp_path):
    (tmp_path / "empty.pth").write_bytes(b"")
    one_line_error(WeightFileError, tmp_path / "empty.pth", "empty file")
    (tmp_path / "text.pth").write_bytes(b"MODEL:\n  WEIGHT: x\n")
    one_line_error(WeightFileError, tmp_path / "text.pth", "not a torch.save checkpoint")
    (tmp_path / "detectron.pkl").write_bytes(pickle.dumps({"conv1_w": np.ones(2)}, protocol=2))
    one_line_error(WeightFileError, tmp_path / "detectron.pkl", "plain pickle", "read_weight_file")
    (tmp_path / "array.pkl").write_bytes(pickle.dumps(np.ones(3), protocol=2))
    one_line_error(WeightFileError, tmp_path / "array.pkl", "plain pickle")
    with tarfile.open(tmp_path / "old.pth", "w") as tar:
        tar.add(FIXTURES / "checkpoint.json", arcname="pickle")
    one_line_error(WeightFileError, tmp_path / "old.pth", "tar-format")
    torch_writer.write_zip(tmp_path / "list.pth", [np.ones(2, np.float32)])
    one_line_error(WeightFileError, tmp_path / "list.pth", "top level is a list")
    zip_with(tmp_path / "nopkl.pth", {"weights.bin": b"1234"})
    one_line_error(WeightFileError, tmp_path / "nopkl.pth", "data.pkl")
    one_line_error(WeightFileError, tmp_path / "absent.pth", "cannot open")
    assert "torch" not in sys.modules
