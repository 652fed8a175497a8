"""The 22 MCT criteria and the statistics of the real rule set the generator is calibrated to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

CriterionKind = Literal["equ", "date_range", "int_range"]


@dataclass(frozen=True)
class CriterionSpec:
    """One MCT criterion: its code, matching kind, whether it may be a wildcard, its weight."""

    code: str
    kind: CriterionKind
    mandatory: bool
    weight: int


def _equ(code: str, weight: int, mandatory: bool = False) -> CriterionSpec:
    return CriterionSpec(code, "equ", mandatory, weight)


#: The 22 MCT criteria in ERBIUM order (= CSV column order = XML sequenceNumber).
CRITERIA: tuple[CriterionSpec, ...] = (
    _equ("CTN_TYPE", 0, mandatory=True),
    CriterionSpec("MCT_PRD", "date_range", False, 1 << 0),
    _equ("MCT_BRD", 0, mandatory=True),
    _equ("MCT_OFF", 0, mandatory=True),
    _equ("IN_CRR", 1 << 7),
    _equ("OUT_CRR", 1 << 17),
    _equ("IN_EQP", 1 << 1),
    _equ("OUT_EQP", 1 << 11),
    _equ("NXT_APT", 1 << 16),
    _equ("NXT_AREA", 1 << 13),
    _equ("NXT_CTRY", 1 << 14),
    _equ("PRV_AREA", 1 << 3),
    _equ("PRV_CTRY", 1 << 4),
    _equ("NXT_STATE", 1 << 15),
    _equ("PRV_STATE", 1 << 5),
    _equ("IN_FLT_NB", 1 << 9),
    _equ("OUT_FLT_NB", 1 << 19),
    _equ("IN_TER", 1 << 2),
    CriterionSpec("IN_FLT_RG", "int_range", False, 1 << 8),
    CriterionSpec("OUT_FLT_RG", "int_range", False, 1 << 18),
    _equ("OUT_TER", 1 << 12),
    _equ("PRV_APT", 1 << 6),
)
CRITERION_CODES: tuple[str, ...] = tuple(c.code for c in CRITERIA)


#: Connection types: first letter = inbound leg, second = outbound leg (Domestic/International).
CTN_TYPES: tuple[str, ...] = ("DD", "DI", "ID", "II")

#: Share of VALID rules with a specific (non-wildcard) value, from the real MCT set (rules.md).
TARGET_SHARES: dict[str, float] = {
    "OUT_CRR": 0.74,
    "IN_CRR": 0.73,
    "OUT_TER": 0.26,
    "IN_TER": 0.25,
    "OUT_FLT_RG": 0.18,
    "IN_FLT_RG": 0.17,
    "MCT_PRD": 0.11,
    "PRV_APT": 0.064,
    "NXT_APT": 0.053,
    "IN_FLT_NB": 0.044,
    "OUT_FLT_NB": 0.039,
    "PRV_CTRY": 0.024,
    "NXT_CTRY": 0.023,
    "IN_EQP": 0.012,
    "PRV_AREA": 0.012,
    "NXT_AREA": 0.012,
    "OUT_EQP": 0.008,
    "NXT_STATE": 0.0003,
    "PRV_STATE": 0.0003,
}

#: Share of INVALID rules (real set: 136,002 rules of which 107,394 valid).
INVALID_SHARE = 1.0 - 107_394 / 136_002
