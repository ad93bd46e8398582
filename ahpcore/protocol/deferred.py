"""Model bases whose validators are built on first use, not at class creation.

The lenient models are some 550 classes; building every validator up front
was most of the CPU to a host's first answer, while a host uses a few dozen.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import pydantic

_Root = TypeVar("_Root")


class BaseModel(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(defer_build=True)


class RootModel(pydantic.RootModel[_Root], Generic[_Root]):
    model_config = pydantic.ConfigDict(defer_build=True)
