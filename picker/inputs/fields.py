"""Strict field types and the frozen section base every workload-profile section is built on.

    >>> from pydantic import TypeAdapter
    >>> TypeAdapter(PosInt).validate_python(4)
    4
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

# Strict numbers: YAML already types scalars, so "4" (a string) or true (a bool) where a count is
# expected is a mistake worth reporting rather than silently coercing.
PosInt = Annotated[int, Field(strict=True, ge=1)]
PosFloat = Annotated[float, Field(strict=True, gt=0)]
NonNegFloat = Annotated[float, Field(strict=True, ge=0)]
Weight = Annotated[float, Field(strict=True, ge=0, le=1)]
Name = Annotated[str, Field(strict=True), StringConstraints(strip_whitespace=True, min_length=1)]


class Section(BaseModel):
    """Base of every profile section: unknown keys are errors, loaded values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)
