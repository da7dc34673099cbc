"""Detectron weight files for porting tests, as reference/detectron.md §1-§2 describes them.

The blob inventories come from §2's naming rules, never from tfdet's `model_blobs`: `expected_resnet_blobs`
(§2.1: stem and res2..res5) and `expected_fpn_blobs` (§2.3); `zoo_blob_shapes(arch)` a whole zoo model's (FPN
or C4, box, mask and keypoint heads, §2.4-§2.7) for a `ZooArch` such as `R50_MASK_FPN`, and
`body_blob_shapes(arch)` its body's. `random_blobs` fills an inventory with values that keep activations of
order one; `momentum_junk`, `msra_imagenet_junk` and `resnext_imagenet_junk` add what real files carry
besides the parameters; `retinanet_blob_shapes`, `retinanet_saved_cfg` and
`write_retinanet_model_final` make a RetinaNet zoo `model_final.pkl` (§2.3, §2.8). `Py2Writer`
writes a pickle as Python 2 + numpy 1.x did (byte strings that Python 3 only reads with latin1
decoding) and `detectron_cfg_yaml` the `yaml.dump(cfg)` string with Python tags that trained
files embed. No tfdet import: the files must not be
derived from the code under test.
"""

import base64
import dataclasses
import struct

import numpy as np

RES5_DIM = 2048
IMAGENET_CLASSES = 1000
FPN_DIM = 256


def random_blobs(shapes, rng):
    """float32 values per blob: weights N(0, 1/fan_in), scales U(0.8, 1.2), biases N(0, 0.1).

    Fan-in is the product of all axes but the first (Caffe2's), so activations stay of order one
    through a whole network and float32 errors stay measurable against a float64 reference.
    """
    blobs = {}
    for name, shape in shapes.items():
        if name.endswith("_s"):
            blobs[name] = rng.uniform(0.8, 1.2, shape).astype(np.float32)
            continue
        blobs[name] = rng.standard_normal(shape, dtype=np.float32)
        blobs[name] *= np.float32(1.0 / np.sqrt(np.prod(shape[1:])) if name.endswith("_w") else 0.1)  # in place
    return blobs


def momentum_junk(blobs):
    """`<blob>_momentum` for what Detectron trains (§1.1): not AffineChannel, not stem/res2 (FREEZE_AT 2),
    not the fixed `kps_score` upsampling."""
    frozen = ("conv1_", "res_conv1_", "res2_", "kps_score_w", "kps_score_b")
    return {
        f"{name}_momentum": np.zeros(value.shape, np.float32)
        for name, value in blobs.items()
        if "_bn_" not in name and not name.startswith(frozen)
    }


def msra_imagenet_junk(body_shapes):
    """What MSRA R-50/R-101 .pkl files add (§2.1): zero conv biases of the stem and every block conv,
    and the ImageNet classifier `fc1000_w/_b`."""
    junk = {"conv1_b": np.zeros(64, np.float32)}
    for name, shape in body_shapes.items():
        if name.startswith("res") and name.endswith("_w"):
            junk[name[:-2] + "_b"] = np.zeros(shape[0], np.float32)
    junk["fc1000_w"] = np.full((IMAGENET_CLASSES, RES5_DIM), 0.01, np.float32)
    junk["fc1000_b"] = np.zeros(IMAGENET_CLASSES, np.float32)
    return junk


def resnext_imagenet_junk():
    """The ResNeXt / GN ImageNet classifier `pred_w/_b` (§2.1)."""
    return {
        "pred_w": np.full((IMAGENET_CLASSES, RES5_DIM), 0.01, np.float32),
        "pred_b": np.zeros(IMAGENET_CLASSES, np.float32),
    }


# ---------------------------------------------------------------------------------------------
# Blob inventories from reference §2 (independent of tfdet)
# ---------------------------------------------------------------------------------------------


def expected_resnet_blobs(block_counts, groups, width, norm):
    """Blob -> shape from §2.1's rules: stem, then per block branch2a/2b/2c (+ branch1 when dims change)."""
    stem_norm = "res_conv1_bn" if norm == "bn" else "conv1_gn"
    blobs = {"conv1_w": (64, 3, 7, 7), f"{stem_norm}_s": (64,), f"{stem_norm}_b": (64,)}
    dim_in = 64
    for stage, num_blocks in enumerate(block_counts, start=2):
        inner, out = groups * width * 2 ** (stage - 2), 256 * 2 ** (stage - 2)
        for index in range(num_blocks):
            convs = {
                "branch2a": (inner, dim_in, 1, 1),
                "branch2b": (inner, inner // groups, 3, 3),
                "branch2c": (out, inner, 1, 1),
            }
            if dim_in != out:
                convs["branch1"] = (out, dim_in, 1, 1)
            for branch, shape in convs.items():
                prefix = f"res{stage}_{index}_{branch}"
                blobs.update({f"{prefix}_w": shape, f"{prefix}_{norm}_s": shape[:1], f"{prefix}_{norm}_b": shape[:1]})
            dim_in = out
    return blobs


def expected_fpn_blobs(stage_sums, norm, dim=256):
    """Blob -> shape from §2.3: inner 1x1 (top) / lateral 1x1, 3x3 outputs; biases, or `_gn` when GN."""
    lateral_dims = dict(zip(stage_sums, (2048, 1024, 512, 256)))
    convs = {}
    for index, blob in enumerate(stage_sums):
        inner = f"fpn_inner_{blob}" if index == 0 else f"fpn_inner_{blob}_lateral"
        convs[inner] = (dim, lateral_dims[blob], 1, 1)
        convs[f"fpn_{blob}"] = (dim, dim, 3, 3)
    blobs = {}
    for name, shape in convs.items():
        blobs[f"{name}_w"] = shape
        extra = ("_gn_s", "_gn_b") if norm == "gn" else ("_b",)
        blobs.update({f"{name}{suffix}": (dim,) for suffix in extra})
    return blobs


MLP_HEAD_DIM = 1024
IOHW_DECONVS = ("conv5_mask", "kps_score_lowres", "kps_score")  # Caffe2 ConvTranspose blobs: (I, O, kh, kw)


@dataclasses.dataclass(frozen=True)
class ZooArch:
    """What decides a Detectron model's blobs: body (§2.1), FPN or C4, box / mask / keypoint heads."""

    block_counts: tuple = (3, 4, 6, 3)
    groups: int = 1
    width_per_group: int = 64
    norm: str = "bn"  # "gn": GN stem, blocks and FPN (04_2018_gn_baselines)
    fpn: bool = True
    box_head: str = "2mlp"  # "2mlp" (fc6, fc7), "4conv1fc_gn" (head_conv1..4 + GN, fc6), "res5" (C4)
    mask_head: str = ""  # "", "fcn" (_[mask]_fcn1..4), "fcn_gn" (_mask_fcn1..4 + GN), "v0upshare" (C4)
    keypoints: bool = False
    num_classes: int = 81


def _conv(name, shape):
    """A Caffe2 Conv / FC / ConvTranspose `<name>_w` and its bias `<name>_b` (output channels)."""
    out_channels = shape[1] if name in IOHW_DECONVS else shape[0]
    return {f"{name}_w": shape, f"{name}_b": (out_channels,)}


def _conv_gn(name, shape):
    """Detectron's ConvGN: a bias-free conv `<name>_w`, then `<name>_gn_s`, `<name>_gn_b`."""
    return {f"{name}_w": shape, f"{name}_gn_s": shape[:1], f"{name}_gn_b": shape[:1]}


def stage_sums(block_counts):
    """Last-block sums of res5..res2 (`res4_5_sum` for R-50), coarse to fine as FPN lists them."""
    return tuple(f"res{stage}_{count - 1}_sum" for stage, count in reversed(list(enumerate(block_counts, start=2))))


def body_blob_shapes(arch):
    """Stem and res2..res5 (§2.1); in C4 models res5 belongs to the box head, under the same names."""
    return expected_resnet_blobs(arch.block_counts, arch.groups, arch.width_per_group, arch.norm)


def zoo_blob_shapes(arch):
    """{blob: Caffe2 shape} of every parameter of a Detectron model, by §2's rules (no junk)."""
    blobs = body_blob_shapes(arch)
    if arch.fpn:
        blobs.update(expected_fpn_blobs(stage_sums(arch.block_counts), arch.norm, FPN_DIM))
    # RPN (§2.4): FPN shares one head stored under the lowest level's names; C4 has 15 anchors on res4.
    dim, anchors, tag = (FPN_DIM, 3, "_fpn2") if arch.fpn else (1024, 15, "")
    blobs.update(_conv(f"conv_rpn{tag}", (dim, dim, 3, 3)))
    blobs.update(_conv(f"rpn_cls_logits{tag}", (anchors, dim, 1, 1)))
    blobs.update(_conv(f"rpn_bbox_pred{tag}", (4 * anchors, dim, 1, 1)))
    # Box head and outputs (§2.5); fc6 takes the NCHW-flattened 7x7 RoI feature.
    head_dim = MLP_HEAD_DIM
    if arch.box_head == "2mlp":
        blobs.update(_conv("fc6", (MLP_HEAD_DIM, FPN_DIM * 7 * 7)))
        blobs.update(_conv("fc7", (MLP_HEAD_DIM, MLP_HEAD_DIM)))
    elif arch.box_head == "4conv1fc_gn":
        for i in range(1, 5):
            blobs.update(_conv_gn(f"head_conv{i}", (256, FPN_DIM, 3, 3)))
        blobs.update(_conv("fc6", (MLP_HEAD_DIM, 256 * 7 * 7)))
    elif arch.box_head == "res5":
        head_dim = RES5_DIM  # the res5_* blobs are already among the body's
    else:
        raise ValueError(f"unknown box head {arch.box_head!r}")
    classes = arch.num_classes
    blobs.update(_conv("cls_score", (classes, head_dim)))
    blobs.update(_conv("bbox_pred", (4 * classes, head_dim)))
    # Mask heads (§2.6): the C4 head's `_[mask]_res5_*` are not in files (']_' rule: from res5_*).
    if arch.mask_head in ("fcn", "fcn_gn"):
        for i in range(1, 5):
            if arch.mask_head == "fcn":
                blobs.update(_conv(f"_[mask]_fcn{i}", (256, FPN_DIM, 3, 3)))
            else:
                blobs.update(_conv_gn(f"_mask_fcn{i}", (256, FPN_DIM, 3, 3)))
        blobs.update(_conv("conv5_mask", (256, 256, 2, 2)))
    elif arch.mask_head == "v0upshare":
        blobs.update(_conv("conv5_mask", (RES5_DIM, 256, 2, 2)))
    elif arch.mask_head:
        raise ValueError(f"unknown mask head {arch.mask_head!r}")
    if arch.mask_head:
        blobs.update(_conv("mask_fcn_logits", (classes, 256, 1, 1)))
    # Keypoint head (§2.7): 8 convs of 512, the learned 4x4 deconv to 17 maps, the fixed 2x upsampling.
    if arch.keypoints:
        for i in range(1, 9):
            blobs.update(_conv(f"conv_fcn{i}", (512, FPN_DIM if i == 1 else 512, 3, 3)))
        blobs.update(_conv("kps_score_lowres", (512, 17, 4, 4)))
        blobs.update(_conv("kps_score", (17, 17, 4, 4)))
    return blobs


R50_MASK_FPN = ZooArch(mask_head="fcn")
R50_KEYPOINT_FPN = ZooArch(keypoints=True, num_classes=2)
R50_MASK_C4 = ZooArch(fpn=False, box_head="res5", mask_head="v0upshare")
X101_64X4D_FASTER_FPN = ZooArch(block_counts=(3, 4, 23, 3), groups=64, width_per_group=4)
R50_GN_MASK_FPN = ZooArch(norm="gn", box_head="4conv1fc_gn", mask_head="fcn_gn")


def _conv_shapes(name, shape):
    """A Caffe2 conv `<name>_w` and its bias `<name>_b` (one per output channel)."""
    return {f"{name}_w": shape, f"{name}_b": shape[:1]}


def retinanet_blob_shapes(body_shapes, block_counts=(3, 4, 6, 3), num_classes=81, num_convs=4, anchors=9):
    """{blob: Caffe2 shape} of Detectron's RetinaNet over a ResNet body's blobs (§2.3, §2.8; FPN.py,
    retinanet_heads.py): FPN on res5..res3 only (RPN_MIN_LEVEL 3: no res2 lateral or output conv), `fpn_6` a
    3x3 conv on C5 (2048 channels) and `fpn_7` on its ReLU (EXTRA_CONV_LEVELS), then the class and box towers
    of `num_convs` 3x3 convs and their 3x3 predictions, stored under the `_fpn3` names only (ConvShared):
    sigmoid classes ((num_classes - 1) * A outputs), class-agnostic boxes (4 * A)."""
    shapes = dict(body_shapes)
    stage_ends = [f"res{stage}_{block_counts[stage - 2] - 1}_sum" for stage in (5, 4, 3)]
    for index, (stage_end, lateral_dim) in enumerate(zip(stage_ends, (RES5_DIM, 1024, 512))):
        inner = f"fpn_inner_{stage_end}" if index == 0 else f"fpn_inner_{stage_end}_lateral"
        shapes.update(_conv_shapes(inner, (FPN_DIM, lateral_dim, 1, 1)))
        shapes.update(_conv_shapes(f"fpn_{stage_end}", (FPN_DIM, FPN_DIM, 3, 3)))
    shapes.update(_conv_shapes("fpn_6", (FPN_DIM, RES5_DIM, 3, 3)))
    shapes.update(_conv_shapes("fpn_7", (FPN_DIM, FPN_DIM, 3, 3)))
    for kind, outputs in (("cls", (num_classes - 1) * anchors), ("bbox", 4 * anchors)):
        for index in range(num_convs):
            shapes.update(_conv_shapes(f"retnet_{kind}_conv_n{index}_fpn3", (FPN_DIM, FPN_DIM, 3, 3)))
        shapes.update(_conv_shapes(f"retnet_{kind}_pred_fpn3", (outputs, FPN_DIM, 3, 3)))
    return shapes


def retinanet_saved_cfg(**sections):
    """The part of a trained retinanet_R-50-FPN_1x file's `cfg` a port reads (Detectron's defaults with the zoo
    YAML's overrides, as Detectron types them); `sections` {section: {key: value}} replace values."""
    cfg = {
        "MODEL": {
            "TYPE": "retinanet", "CONV_BODY": "FPN.add_fpn_ResNet50_conv5_body", "NUM_CLASSES": 81,
            "BBOX_REG_WEIGHTS": (10.0, 10.0, 5.0, 5.0), "FASTER_RCNN": False, "MASK_ON": False,
            "KEYPOINTS_ON": False, "RPN_ONLY": False,
        },
        "RESNETS": {"NUM_GROUPS": 1, "WIDTH_PER_GROUP": 64, "STRIDE_1X1": True, "RES5_DILATION": 1,
                    "TRANS_FUNC": "bottleneck_transformation", "STEM_FUNC": "basic_bn_stem"},
        "FPN": {
            "FPN_ON": True, "DIM": 256, "MULTILEVEL_RPN": True, "MULTILEVEL_ROIS": False, "RPN_MAX_LEVEL": 7,
            "RPN_MIN_LEVEL": 3, "COARSEST_STRIDE": 128, "EXTRA_CONV_LEVELS": True, "USE_GN": False,
            "RPN_ASPECT_RATIOS": (0.5, 1, 2), "RPN_ANCHOR_START_SIZE": 32,
        },
        "RETINANET": {
            "RETINANET_ON": True, "ASPECT_RATIOS": (1.0, 2.0, 0.5), "SCALES_PER_OCTAVE": 3, "ANCHOR_SCALE": 4,
            "NUM_CONVS": 4, "BBOX_REG_WEIGHT": 1.0, "BBOX_REG_BETA": 0.11, "PRE_NMS_TOP_N": 1000,
            "POSITIVE_OVERLAP": 0.5, "NEGATIVE_OVERLAP": 0.4, "LOSS_ALPHA": 0.25, "LOSS_GAMMA": 2.0,
            "PRIOR_PROB": 0.01, "SHARE_CLS_BBOX_TOWER": False, "CLASS_SPECIFIC_BBOX": False, "SOFTMAX": False,
            "INFERENCE_TH": 0.05,
        },
        "RPN": {"RPN_ON": False},
        "TEST": {"SCALE": 800, "MAX_SIZE": 1333, "NMS": 0.5, "DETECTIONS_PER_IM": 100, "RPN_PRE_NMS_TOP_N": 10000},
        "PIXEL_MEANS": np.array([[[102.9801, 115.9465, 122.7717]]]),
    }  # fmt: skip
    for section, values in sections.items():
        cfg[section] = {**cfg[section], **values}
    return cfg


def write_retinanet_model_final(path, blobs, body_shapes, saved_cfg):
    """`path`: a RetinaNet model_final.pkl as Detectron (Python 2) saved one trained from MSRA's R-50.pkl: the
    parameters, their momentum, the ImageNet file's preserved blobs (zero conv biases, fc1000) and the cfg.
    Returns the non-parameter blobs it added."""
    junk = {**momentum_junk(blobs), **msra_imagenet_junk(body_shapes)}
    write_py2_detectron_file(path, {**blobs, **junk}, detectron_cfg_yaml(saved_cfg))
    return junk


# ---------------------------------------------------------------------------------------------
# Python 2 pickles and the embedded YAML config
# ---------------------------------------------------------------------------------------------


class Py2Writer:
    """Emits a protocol-2 opcode stream the way Python 2 + numpy 1.x (cPickle) writes Detectron
    files: ``str`` as SHORT_BINSTRING/BINSTRING (8-bit bytes), arrays via
    ``numpy.core.multiarray._reconstruct`` with the raw data as a byte string.

    Opcodes collect in ``out``; with a binary `file`, `dump` streams into it and array data goes
    there straight from the array's memory (zoo files reach 1 GB: no copies of it in between)."""

    def __init__(self, file=None):
        self.out = bytearray(b"\x80\x02")
        self.file = file

    def str_(self, b: bytes):
        if len(b) < 256:
            self.out += b"U" + bytes([len(b)]) + b
        else:
            self.out += b"T" + struct.pack("<i", len(b))
            self.out += b

    def array_data(self, arr):
        """An array's bytes (C order) as a byte string: no intermediate copy when writing to a file."""
        data = memoryview(np.ascontiguousarray(arr)).cast("B")
        self.out += (b"U" + bytes([len(data)])) if len(data) < 256 else (b"T" + struct.pack("<i", len(data)))
        if self.file is None:
            self.out += data
        else:
            self.file.write(self.out)
            self.out.clear()
            self.file.write(data)

    def int_(self, v):
        self.out += b"K" + bytes([v]) if 0 <= v < 256 else b"J" + struct.pack("<i", v)

    def glob(self, module, name):
        self.out += b"c" + module.encode() + b"\n" + name.encode() + b"\n"

    def dtype(self, arr):
        self.glob("numpy", "dtype")
        self.str_(arr.dtype.str[1:].encode())
        self.out += b"K\x00K\x01\x87R"  # ('f4', 0, 1) TUPLE3 REDUCE
        self.out += b"(K\x03" + b"U\x01" + arr.dtype.str[:1].encode() + b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb"

    def value(self, v):
        if isinstance(v, bytes):
            self.str_(v)
        elif isinstance(v, str):  # py2 unicode
            b = v.encode("utf-8")
            self.out += b"X" + struct.pack("<I", len(b)) + b
        elif v is None:
            self.out += b"N"
        elif isinstance(v, bool):
            self.out += b"\x88" if v else b"\x89"
        elif isinstance(v, int):
            self.int_(v)
        elif isinstance(v, float):
            self.out += b"G" + struct.pack(">d", v)
        elif isinstance(v, list):
            self.out += b"]("
            for x in v:
                self.value(x)
            self.out += b"e"
        elif isinstance(v, dict):
            self.out += b"}("
            for k, x in v.items():
                self.value(k)
                self.value(x)
            self.out += b"u"
        elif isinstance(v, np.ndarray):
            self.glob("numpy.core.multiarray", "_reconstruct")
            self.glob("numpy", "ndarray")
            self.out += b"K\x00\x85U\x01b\x87R"
            self.out += b"(K\x01"
            self.out += b"("
            for d in v.shape:
                self.int_(d)
            self.out += b"t"
            self.dtype(v)
            self.out += b"\x89"
            self.array_data(v)
            self.out += b"tb"
        elif isinstance(v, np.generic):
            self.glob("numpy.core.multiarray", "scalar")
            self.dtype(np.asarray(v))
            self.str_(v.tobytes())
            self.out += b"\x86R"
        else:
            raise TypeError(type(v))

    def dumps(self, v) -> bytes:
        self.value(v)
        self.out += b"."
        return bytes(self.out)

    def dump(self, v):
        """The pickle of `v` into the writer's file."""
        self.value(v)
        self.out += b"."
        self.file.write(self.out)
        self.out.clear()


def write_py2_pickle(path, v):
    """`path` holding `v` pickled as Python 2 did (Py2Writer), streamed to the file."""
    with open(path, "wb") as f:
        Py2Writer(f).dump(v)


def _py2_trained_content(blobs, cfg_text):
    """`{'blobs', 'cfg'}` of a trained file under Python 2: every key a byte string, the cfg too."""
    return {b"blobs": {name.encode(): value for name, value in blobs.items()}, b"cfg": cfg_text.encode()}


def py2_detectron_file(blobs, cfg_text):
    """A trained-model file as Detectron wrote it under Python 2: `{'blobs', 'cfg'}`, every key a
    byte string, the cfg a byte string too."""
    return Py2Writer().dumps(_py2_trained_content(blobs, cfg_text))


def write_py2_detectron_file(path, blobs, cfg_text):
    """`path` holding `py2_detectron_file(blobs, cfg_text)`, streamed to the file."""
    write_py2_pickle(path, _py2_trained_content(blobs, cfg_text))


_ATTR_DICT = "!!python/object/new:detectron.utils.collections.AttrDict"


def _yaml_value(value, indent):
    """`value` as PyYAML's Python-2 `yaml.dump` writes it after `KEY: `; later lines at `indent`."""
    pad = " " * indent
    if isinstance(value, dict):
        lines = [_ATTR_DICT, f"{pad}dictitems:"]
        lines += [f"{pad}  {key}: {_yaml_value(item, indent + 4)}" for key, item in value.items()]
        lines += [f"{pad}state:", f"{pad}  __immutable__: true"]
        return "\n".join(lines)
    if isinstance(value, tuple):
        return "!!python/tuple [" + ", ".join(_yaml_value(v, indent) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, np.ndarray):
        data = base64.b64encode(np.ascontiguousarray(value, "<f8").tobytes()).decode("ascii")
        shape = ", ".join(str(d) for d in value.shape)
        return "\n".join(
            [
                "!!python/object/apply:numpy.core.multiarray._reconstruct",
                f"{pad}args:",
                f"{pad}- !!python/name:numpy.ndarray ''",
                f"{pad}- !!python/tuple [0]",
                f"{pad}- b",
                f"{pad}state: !!python/tuple",
                f"{pad}- 1",
                f"{pad}- !!python/tuple [{shape}]",
                f"{pad}- !!python/object/apply:numpy.dtype",
                f"{pad}  args: [f8, 0, 1]",
                f"{pad}  state: !!python/tuple [3, <, null, null, null, -1, -1, 0]",
                f"{pad}- false",
                f"{pad}- !!binary |",
                f"{pad}  {data}",
            ]
        )
    if isinstance(value, str) and "." in value:
        return f"!!python/unicode '{value}'"  # function names came from the YAML file as unicode
    return str(value)


def detectron_cfg_yaml(cfg):
    """The `cfg` string of a trained Detectron file: nested dicts as AttrDicts, tuples, numpy arrays."""
    return _yaml_value(cfg, 0) + "\n"
