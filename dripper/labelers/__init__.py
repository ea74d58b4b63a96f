"""Block labelers. ``available_labelers()`` / ``build_labeler(name)`` load the built-in ones by name."""

from dripper.labelers.base import (
    BlockLabeler,
    LabelRequest,
    Labels,
    available_labelers,
    build_labeler,
    register_labeler,
)

__all__ = [
    "BlockLabeler",
    "LabelRequest",
    "Labels",
    "available_labelers",
    "build_labeler",
    "register_labeler",
]
