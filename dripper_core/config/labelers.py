"""Labeler names, without importing a labeler: the built-in ones (name → ``module:object``) and those that
installed distributions announce through the ``dripper.labelers`` entry-point group. DAG files read this
module at parse time; :mod:`dripper_core.labelers.base` resolves a name to its class."""

from __future__ import annotations

__all__ = ["BUILTIN_LABELERS", "DEFAULT_LABELER", "ENTRY_POINT_GROUP", "labeler_names", "labeler_targets"]

#: The labeler used when none is named: the shipped CPU model (no GPU, no download).
DEFAULT_LABELER = "cpu"
#: The labelers that ship with the package, by name → ``module:object``.
BUILTIN_LABELERS: dict[str, str] = {
    "cpu": "dripper_core.labelers.cpu.model:CpuLabeler",
    "oracle": "dripper_core.labelers.oracle:OracleLabeler",
    "trafilatura": "dripper_core.labelers.trafilatura:TrafilaturaLabeler",
    "vllm": "dripper_core.labelers.vllm_labeler:VLLMLabeler",
    "openai": "dripper_core.labelers.openai_labeler:OpenAILabeler",
    "torch": "dripper_core.labelers.torch_engine:TorchLabeler",
}
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
