"""Labeler names, without importing a labeler: the built-in ones (name → ``module:object``) and those that
installed distributions announce through the ``dripper.labelers`` entry-point group. DAG files read this
module at parse time. :func:`labeler_factory` resolves a name to its class, importing that labeler's module
only; the labeler interface itself is :mod:`dripper.labelers.base`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dripper.hints import did_you_mean

__all__ = [
    "BUILTIN_LABELERS",
    "DEFAULT_LABELER",
    "ENTRY_POINT_GROUP",
    "PAGE_EXTRACTORS",
    "LabelerFactory",
    "available_labelers",
    "labeler_factory",
    "labeler_names",
    "labeler_targets",
    "register_labeler",
]

#: The labeler used when none is named: the shipped CPU model (no GPU, no download).
DEFAULT_LABELER = "cpu"
#: The labelers that ship with the package, by name → ``module:object``.
BUILTIN_LABELERS: dict[str, str] = {
    "cpu": "dripper.labelers.cpu.model:CpuLabeler",
    "cpu_seq": "dripper.labelers.cpu_seq.labeler:CpuSeqLabeler",
    "oracle": "dripper.labelers.oracle:OracleLabeler",
    "trafilatura": "dripper.labelers.trafilatura:TrafilaturaLabeler",
    "vllm": "dripper.labelers.vllm_labeler:VLLMLabeler",
    "openai": "dripper.labelers.openai_labeler:OpenAILabeler",
    "torch": "dripper.labelers.torch_engine:TorchLabeler",
    # Whole-page extractors (dripper.labelers.whole_page.PageExtractor): the ablation's baseline arms.
    "fineweb": "dripper.labelers.whole_page:FineWebExtractor",
    "dclm": "dripper.labelers.whole_page:DclmExtractor",
}
#: The built-in names that are whole-page extractors, not block labelers: their text is the document, and a
#: spec naming one has no fallback unless it gives one (the anchors dropped what their extractor missed).
PAGE_EXTRACTORS: frozenset[str] = frozenset({"fineweb", "dclm"})
#: Where other distributions add labelers by name, in their ``pyproject.toml``:
#: ``[project.entry-points."dripper.labelers"]`` ``mine = "my_package.module:MyLabeler"``.
ENTRY_POINT_GROUP = "dripper.labelers"


def labeler_targets() -> dict[str, str]:
    """``{name: "module:object"}`` of every built-in and installed plugin labeler (package metadata only;
    a plugin cannot shadow a built-in name)."""
    from importlib.metadata import entry_points

    plugins = {point.name: point.value for point in entry_points(group=ENTRY_POINT_GROUP)}
    return {**plugins, **BUILTIN_LABELERS}


def labeler_names() -> list[str]:
    """Every built-in and installed plugin labeler name, sorted."""
    return sorted(labeler_targets())


#: A labeler class, or a function that builds a ``dripper.labelers.base.BlockLabeler`` from its options.
LabelerFactory = Callable[..., Any]
_REGISTRY: dict[str, LabelerFactory] = {}


def register_labeler(name: str) -> Callable[[LabelerFactory], LabelerFactory]:
    """Register a labeler class or factory under ``name`` when its module is imported (for labelers that
    are neither built in nor announced through the ``dripper.labelers`` entry-point group)."""

    def decorator(factory: LabelerFactory) -> LabelerFactory:
        if _REGISTRY.get(name, factory) is not factory:
            raise ValueError(f"labeler {name!r} is already registered")
        _REGISTRY[name] = factory
        return factory

    return decorator


def available_labelers() -> list[str]:
    """Every labeler name: built in, announced through the ``dripper.labelers`` entry-point group, or
    registered. Imports no labeler module."""
    return sorted(set(_REGISTRY) | set(labeler_targets()))


def labeler_factory(name: str) -> LabelerFactory:
    """The class or factory of the labeler ``name`` (a registered name or ``module:factory``), importing
    only its own module.

    Raises:
        KeyError: an unknown name (with the closest names), or an import path that does not import.
    """
    if name in _REGISTRY:
        return _REGISTRY[name]
    target = name if ":" in name else labeler_targets().get(name)
    if target is None:
        known = available_labelers()
        raise KeyError(f"unknown labeler {name!r} (known: {', '.join(known)}){did_you_mean(name, known)}")
    import importlib

    module_name, _, attribute = target.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise KeyError(
            f"labeler {name!r}: cannot import {attribute!r} from {module_name!r} ({error}); "
            "give a registered name or module:factory"
        ) from error
    if ":" not in name:
        _REGISTRY.setdefault(name, factory)
    return factory
