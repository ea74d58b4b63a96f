"""One typed config per stage, and the three front ends generated from it.

A stage config is a pydantic model whose fields are declared with :func:`setting`: one name, one type, one
default and one description. From the model come

- the Python API's values (``ExtractStageConfig(batch_size=128)``, validation errors naming the field),
- the ``dripper run STAGE`` flags (:meth:`StageConfig.add_arguments`, read back by
  :meth:`StageConfig.from_arguments`): ``batch_size`` is ``--batch-size``,
- the Airflow trigger form's fields (:meth:`StageConfig.form_fields`, JSON schemas that ``dags/_params.py``
  wraps in ``Param``): a field appears as ``{form_prefix}{name}`` (``extract_batch_size``) in the stage's
  section, or as its bare name where it is unambiguous across stages (``fallback``, ``tokenizer``).

Only the standard library and pydantic are imported: DAG files import the stage configs at parse time.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = ["StageConfig", "StageConfigError", "parse_key_values", "parse_value", "setting"]

_META = "x-dripper"


class StageConfigError(ValueError):
    """A stage config value that cannot run; the message names the stage and the field."""


def setting(
    default: Any,
    description: str,
    *,
    title: str | None = None,
    form: bool = True,
    prefixed: bool = True,
    cli: bool = True,
    aliases: Iterable[str] = (),
    env: str | None = None,
    **constraints: Any,
) -> Any:
    """A stage config field.

    Args:
        default: The one default (a list or dict is copied per instance).
        description: One sentence, shown as the CLI help and the form's description.
        title: The form's label (default: from the name).
        form: Whether the field is in the Airflow forms.
        prefixed: The form name carries the stage's prefix (``extract_`` + ``batch_size``); off for fields
            whose name is unambiguous in a form that holds several stages.
        cli: Whether ``dripper run STAGE`` has a flag for it.
        aliases: More flags accepted for it (older spellings), hidden from the help.
        env: An environment variable that, where set, is the form's proposed value (a deployment's choice;
            the config and the CLI keep the default).
        **constraints: pydantic constraints (``ge``, ``le``, ``gt``, ``min_length``…), also in the form's schema.
    """
    meta = {"form": form, "prefixed": prefixed, "cli": cli, "aliases": list(aliases), "env": env}
    kwargs: dict[str, Any] = {"description": description, "json_schema_extra": {_META: meta}, **constraints}
    if title:
        kwargs["title"] = title
    if isinstance(default, (list, dict)):
        return Field(default_factory=lambda: type(default)(default), **kwargs)
    return Field(default, **kwargs)


class StageConfig(BaseModel):
    """Base of the stage configs: subclasses declare their fields with :func:`setting`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The stage's name (``dripper run STAGE``).
    stage: ClassVar[str] = ""
    #: Prefix of the stage's fields in a form (``extract_``).
    form_prefix: ClassVar[str] = ""
    #: The form section the stage's fields are shown in.
    form_section: ClassVar[str] = ""

    # -- the Python side ---------------------------------------------------------------------------------

    @classmethod
    def parse(cls, values: Mapping[str, Any] | None = None, **more: Any) -> StageConfig:
        """The config from values; a bad value raises :class:`StageConfigError` naming the field."""
        try:
            return cls.model_validate({**(values or {}), **more})
        except ValidationError as error:
            problems = "; ".join(_problem(e) for e in error.errors())
            raise StageConfigError(f"{cls.stage} config: {problems}") from None

    @classmethod
    def default(cls, name: str) -> Any:
        """The default of one field (a fresh copy for lists and dicts)."""
        return cls.model_fields[name].get_default(call_default_factory=True)

    @classmethod
    def field_schemas(cls) -> dict[str, dict[str, Any]]:
        """Each field's JSON schema (pydantic's, computed once per class: DAG files build forms on every parse)."""
        if "_field_schemas" not in cls.__dict__:
            cls._field_schemas = cls.model_json_schema()["properties"]
        return cls._field_schemas

    @classmethod
    def _meta(cls, name: str) -> dict[str, Any]:
        extra = cls.model_fields[name].json_schema_extra or {}
        return extra.get(_META, {}) if isinstance(extra, dict) else {}

    # -- the command line --------------------------------------------------------------------------------

    @classmethod
    def cli_fields(cls) -> list[str]:
        return [name for name in cls.model_fields if cls._meta(name).get("cli", True)]

    @classmethod
    def flag(cls, name: str) -> str:
        return "--" + name.replace("_", "-")

    @classmethod
    def add_arguments(
        cls, parser: argparse.ArgumentParser, names: Iterable[str] | None = None, skip: Iterable[str] = ()
    ) -> None:
        """Add a flag per CLI field (all, or ``names``, less ``skip``): default, type and help from the field."""
        skip = set(skip)
        properties = cls.field_schemas()
        for name in list(names) if names is not None else cls.cli_fields():
            if name in skip:
                continue
            schema = _plain(properties[name])
            kwargs: dict[str, Any] = {"dest": name, "default": cls.default(name)}
            kinds = _types(schema)
            default_text = "" if kwargs["default"] in (None, [], {}) else " (default: %(default)s)"
            kwargs["help"] = (schema.get("description") or "").rstrip(".").replace("%", "%%") + default_text
            if kinds == {"boolean"}:
                kwargs["action"] = argparse.BooleanOptionalAction
            elif "array" in kinds:
                item = schema.get("items", {})
                kwargs.update(nargs="*", action=_ListAction, metavar="VALUE")
                kwargs["type"] = _PY_TYPES.get(_first(_types(item)), str)
                if "enum" in item:
                    kwargs["metavar"] = "{" + ",".join(item["enum"]) + "}"
                    kwargs["help"] += "; several values: space- or comma-separated"
            elif "object" in kinds:
                kwargs.update(type=_json_object(cls.flag(name)), metavar="JSON|@FILE")
            else:
                kwargs["type"] = _PY_TYPES.get(_first(kinds - {"null"}), str)
                if "enum" in schema:
                    kwargs["choices"] = schema["enum"]
            flags = [cls.flag(name), *cls._meta(name).get("aliases", [])]
            parser.add_argument(*flags, **kwargs)

    @classmethod
    def from_arguments(cls, args: argparse.Namespace, **more: Any) -> StageConfig:
        """The config from parsed flags (the CLI fields present in ``args``) and more values."""
        values = {name: getattr(args, name) for name in cls.cli_fields() if hasattr(args, name)}
        return cls.parse(values, **more)

    # -- the Airflow forms -------------------------------------------------------------------------------

    @classmethod
    def form_name(cls, name: str) -> str:
        return cls.form_prefix + name if cls._meta(name).get("prefixed", True) else name

    @classmethod
    def form_fields(cls, names: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        """``{form name: {"default": …, JSON schema…}}`` for the form fields (all, or ``names``), in the stage's
        section; a field's ``env`` variable, where set, replaces the proposed default."""
        properties = cls.field_schemas()
        chosen = list(names) if names is not None else list(cls.model_fields)
        fields: dict[str, dict[str, Any]] = {}
        for name in chosen:
            meta = cls._meta(name)
            if not meta.get("form", True):
                raise ValueError(f"{cls.__name__}.{name} is not a form field")
            schema = _plain(properties[name])
            schema.pop("default", None)
            default = cls.default(name)
            if meta.get("env") and os.environ.get(meta["env"]):
                default = _from_env(os.environ[meta["env"]], schema)
            fields[cls.form_name(name)] = {"default": default, **schema, "section": cls.form_section}
        return fields

    @classmethod
    def form_field_names(cls) -> list[str]:
        return [name for name in cls.model_fields if cls._meta(name).get("form", True)]

    @classmethod
    def form_templates(cls, *names: str) -> dict[str, str]:
        """``{field: "{{ params.<form name> }}"}`` for the form fields (all, or ``names``): a task's ``config``
        rendered from its DAG's form (``render_template_as_native_obj``), read back by :meth:`parse`."""
        return {name: "{{ params." + cls.form_name(name) + " }}" for name in names or cls.form_field_names()}

    @classmethod
    def from_form(cls, params: Mapping[str, Any], **more: Any) -> StageConfig:
        """The config from a form's params (the fields that form has) and more values."""
        values = {
            name: params[cls.form_name(name)]
            for name in cls.form_field_names()
            if cls.form_name(name) in params
        }
        return cls.parse(values, **more)


_PY_TYPES = {"integer": int, "number": float, "string": str}


def _problem(error: Mapping[str, Any]) -> str:
    """One validation error as ``field: message``; a cross-field rule's (no field) as its message alone.

    pydantic prefixes a validator's ``ValueError`` with "Value error, ", which says nothing to a user.
    """
    message = str(error["msg"]).removeprefix("Value error, ")
    field = ".".join(str(part) for part in error["loc"])
    if not field or message.startswith(f"{field} "):  # a cross-field rule, or a message naming its field
        return message
    return f"{field}: {message}"


def _types(schema: Mapping[str, Any]) -> set[str]:
    kind = schema.get("type", "string")
    return set(kind) if isinstance(kind, list) else {kind}


def _first(kinds: set[str]) -> str:
    for kind in ("integer", "number", "string"):
        if kind in kinds:
            return kind
    return "string"


def _plain(schema: Mapping[str, Any]) -> dict[str, Any]:
    """pydantic's field schema as a form schema: ``anyOf [X, null]`` becomes ``type: [X…, "null"]``, the
    Dripper metadata is dropped."""
    schema = {k: v for k, v in schema.items() if k != _META}
    if "anyOf" in schema:
        branches = schema.pop("anyOf")
        kinds: list[str] = []
        for branch in branches:
            for key, value in branch.items():
                if key == "type":
                    kinds.extend(value if isinstance(value, list) else [value])
                else:
                    schema[key] = value
        schema["type"] = list(dict.fromkeys(kinds))
    if "const" in schema:  # a one-value Literal
        schema["enum"] = [schema.pop("const")]
    return schema


def _from_env(text: str, schema: Mapping[str, Any]) -> Any:
    kinds = _types(schema)
    if "array" in kinds:
        return [part for part in text.split(",") if part]
    if "integer" in kinds:
        return int(text)
    if "number" in kinds:
        return float(text)
    if "boolean" in kinds:
        return text.lower() in ("1", "true", "yes")
    return text


class _ListAction(argparse.Action):
    """A list flag: ``--steps language minhash`` or ``--steps language,minhash``."""

    def __call__(self, parser, namespace, values, option_string=None):
        items = [part for value in values for part in str(value).split(",") if part]
        setattr(namespace, self.dest, [self.type(item) for item in items] if self.type else items)


def _json_object(flag: str):
    def parse(text: str) -> dict[str, Any]:
        try:
            if text.startswith("@"):
                with open(text[1:], encoding="utf-8") as handle:
                    value = json.load(handle)
            else:
                value = json.loads(text)
        except (OSError, ValueError) as error:
            raise argparse.ArgumentTypeError(f"{flag}: {error}") from None
        if not isinstance(value, dict):
            raise argparse.ArgumentTypeError(f"{flag}: expected a JSON object")
        return value

    return parse


def parse_value(text: str) -> Any:
    """A ``KEY=VALUE`` value: JSON where it parses as JSON (numbers, true/false, null, objects), else the
    string itself."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_key_values(pairs: list[str] | None, flag: str) -> dict:
    """``["a=1", "client_kwargs.region_name=eu-west-1"]`` → ``{"a": 1, "client_kwargs": {"region_name": …}}``.

    Values go through :func:`parse_value`; dotted keys nest. ``flag`` names the option in the error.
    """
    options: dict = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(
                f"{flag} {pair!r}: expected KEY=VALUE, e.g. {flag} endpoint_url=http://127.0.0.1:9000"
            )
        target = options
        *parents, leaf = key.split(".")
        for parent in parents:
            target = target.setdefault(parent, {})
        target[leaf] = parse_value(value)
    return options
