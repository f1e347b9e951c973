"""The small shared pieces of the settings models: the frozen, strict base model and the number types.

They live apart from ``fabric.core.settings`` so that section modules (``settings_moves``) can build
on them without importing the module that assembles ``FabricSettings`` from those sections (a
cycle). ``fabric.core.settings`` re-exports all three under their old names."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

PositiveSeconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class SettingsModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

_Model = SettingsModel  # the name it had (kept for callers that still use it)
