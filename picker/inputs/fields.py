"""Strict field types and the frozen section base every workload-profile section is built on.

    >>> from pydantic import TypeAdapter
    >>> TypeAdapter(PosInt).validate_python(4)
    4
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationInfo

# Strict numbers: YAML already types scalars, so "4" (a string) or true (a bool) where a count is
# expected is a mistake worth reporting rather than silently coercing.
PosInt = Annotated[int, Field(strict=True, ge=1)]
PosFloat = Annotated[float, Field(strict=True, gt=0)]
NonNegFloat = Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)]
Weight = Annotated[float, Field(strict=True, ge=0, le=1)]
Name = Annotated[str, Field(strict=True), StringConstraints(strip_whitespace=True, min_length=1)]
# Physical ceilings: generous bounds no real deployment reaches, so a value off by orders of magnitude
# is a one-line error instead of a number the cost model overflows on (a 1e300-billion-parameter
# draft made `recommend` divide by a zero speedup).
MAX_PARAMS_B = 10_000.0  # 10 trillion parameters; the largest published models have about 2 trillion
MAX_DIM = 1 << 20  # layers, widths, heads, vocabulary: the largest real values are ~1e5 or less
MAX_TOKENS = 10_000_000  # the longest published context windows
MAX_BATCH = 65_536  # sequences decoded together by one engine (`specpick estimate --batch-size` max)
MAX_DEVICES = 4_096
MAX_MS = 86_400_000.0  # one day, for latency targets
Params = Annotated[float, Field(strict=True, gt=0, le=MAX_PARAMS_B)]
Dim = Annotated[int, Field(strict=True, ge=1, le=MAX_DIM)]
Tokens = Annotated[int, Field(strict=True, ge=1, le=MAX_TOKENS)]
TokensFloat = Annotated[float, Field(strict=True, gt=0, le=MAX_TOKENS)]
Batch = Annotated[int, Field(strict=True, ge=1, le=MAX_BATCH)]
Millis = Annotated[float, Field(strict=True, gt=0, le=MAX_MS)]
Devices = Annotated[int, Field(strict=True, ge=1, le=MAX_DEVICES)]
Heads = Annotated[int, Field(strict=True, ge=1, le=64)]


class Section(BaseModel):
    """Base of every profile section: unknown keys are errors, loaded values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class AppliedDefault:
    """A value the profile did not give and the loader supplied (or a name it had to interpret).

    >>> AppliedDefault("engine.version", "0.32.0", "the version the vllm configs are written for").line()
    'engine.version = 0.32.0 (the version the vllm configs are written for)'
    """

    field: str   # dotted profile path
    value: str   # what was used, as it would be written in the profile
    why: str     # where the value comes from, or how to choose another

    def line(self) -> str:
        return f"{self.field} = {self.value} ({self.why})"


ASSUMED_KEY = "assumed"  # validation-context key of the list validators append AppliedDefaults to


def record_default(info: ValidationInfo, field: str, value: Any, why: str) -> None:
    """Note an applied default in the validation context (``load_profile`` passes a list there;
    validating without one fills the same values and records nothing)."""
    ctx = info.context
    sink = ctx.get(ASSUMED_KEY) if isinstance(ctx, dict) else None
    if isinstance(sink, list):
        sink.append(AppliedDefault(field, value if isinstance(value, str) else _yaml_scalar(value), why))


def _yaml_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return f"{value:g}"
    return str(value)
