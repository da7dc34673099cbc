"""What sequence- and mapping-valued keys may hold beyond their default's type, and string keys that
also take a boolean.

Every key whose default is a tuple or a list has an entry in SEQUENCE_RULES, every key whose default
is a dict one in MAPPING_RULES (a dict-valued key is one value, not a config section).
"""

from dataclasses import dataclass

NON_EMPTY = "at least 1"


@dataclass(frozen=True)
class SequenceRule:
    """Element type of a sequence key (float admits ints) and its shape, one entry per nesting level.

    A shape entry is an exact length or NON_EMPTY; an empty shape means a flat sequence of any length.
    """

    element: type
    shape: tuple = ()


SEQUENCE_RULES = {
    "TRAIN.DATASETS": SequenceRule(str),
    "TRAIN.TARGET_DATASETS": SequenceRule(str),
    "TRAIN.SCALES": SequenceRule(int, (NON_EMPTY,)),
    "TRAIN.PROPOSAL_FILES": SequenceRule(str),
    "TEST.DATASETS": SequenceRule(str),
    "TEST.PROPOSAL_FILES": SequenceRule(str),
    "TEST.BBOX_AUG.SCALES": SequenceRule(int),
    "TEST.BBOX_AUG.ASPECT_RATIOS": SequenceRule(float),
    "TEST.MASK_AUG.SCALES": SequenceRule(int),
    "TEST.MASK_AUG.ASPECT_RATIOS": SequenceRule(float),
    "TEST.KPS_AUG.SCALES": SequenceRule(int),
    "TEST.KPS_AUG.ASPECT_RATIOS": SequenceRule(float),
    "MODEL.BBOX_REG_WEIGHTS": SequenceRule(float, (4,)),
    "RETINANET.ASPECT_RATIOS": SequenceRule(float, (NON_EMPTY,)),
    "SOLVER.STEPS": SequenceRule(int),
    "SOLVER.LRS": SequenceRule(float),
    "RPN.SIZES": SequenceRule(float, (NON_EMPTY,)),
    "RPN.ASPECT_RATIOS": SequenceRule(float, (NON_EMPTY,)),
    "FPN.RPN_ASPECT_RATIOS": SequenceRule(float, (NON_EMPTY,)),
    "PIXEL_MEANS": SequenceRule(float, (1, 1, 3)),
    "EXPECTED_RESULTS": SequenceRule(object),
    "TFDET.DA_IMG_FEATURES": SequenceRule(str),
}


@dataclass(frozen=True)
class MappingRule:
    """Key and value types of a mapping-valued key."""

    key: type
    value: type


MAPPING_RULES = {
    "TFDET.DEVICE_MAP": MappingRule(str, str),
}

# String keys that also accept a YAML boolean (`TFDET.MIXED_PRECISION: true`), stored as 'true' / 'false'.
BOOLEAN_TEXT_KEYS = frozenset({"TFDET.MIXED_PRECISION"})
