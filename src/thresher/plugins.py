"""Plug-ins: the sources, sinks, model adapters and executors a spec names.

Every plug-in, built-in or a third party's, is a `Plugin`: its kind, the name a spec uses
(`source.format = "parquet"`, `sink.format`, `model.kind`, `run.executor`), the dotted
path of its factory (imported only when a job uses it) and, if it takes options, the
dotted path of the pydantic model they follow, so a misspelt option is a spec error that
names its field; a model's, what its uri names (`ModelUri`: a file a plan checks is there,
a class whose other options are its arguments); a source's or sink's, whether its uri is a
table's name in a catalog rather than a path (`table_uri`); and, if a job using it implies
more of the spec (a source that names its sink's format, columns an OpenAI batch file's
endpoint implies), its `completes` hook, so that no plug-in's special needs are written into
`spec.py` or `models/`. Built-ins are listed in `builtin_plugins.py` (`BUILTINS` here); a
package adds its own with an entry point in the `thresher.plugins` group whose value is a
Plugin or a list of them:

    [project.entry-points."thresher.plugins"]
    mysink = "mypkg.sink:PLUGIN"      # PLUGIN = Plugin("sink", "mysink", "mypkg.sink:open")

A spec may also name a factory by dotted path (`kind = "mypkg.models:load_mine"`).

What a factory is called with, by kind:

- source: `(section: SourceSection, keep_columns: Sequence[str], min_shards: int) -> Source`
- sink: `(section: SinkSection) -> Sink`
- model: `(spec: ModelSection, context: LoadContext) -> Model`
- executor: `(run: RunSection, placement: Placement) -> Executor`

`thresher.testing` holds the checks every plug-in of a kind passes.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from importlib.metadata import entry_points
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from thresher.builtin_plugins import BUILTIN_PLUGINS
from thresher.errors import ThresherError, describe_errors

__all__ = [
    "BUILTINS",
    "ENTRY_POINT_GROUP",
    "Kind",
    "ModelUri",
    "NoOptions",
    "Options",
    "Plugin",
    "PluginError",
    "check_plugin",
    "check_sink_mode",
    "completion_hooks",
    "default_sink_format",
    "find",
    "is_class_uri",
    "lookup",
    "names",
    "option_problems",
    "registry",
]

ENTRY_POINT_GROUP = "thresher.plugins"


class Kind(StrEnum):
    SOURCE = "source"
    SINK = "sink"
    MODEL = "model"
    EXECUTOR = "executor"

    @property
    def field(self) -> str:
        """The spec field that names a plug-in of this kind."""
        return _FIELDS[self]


_FIELDS = {
    Kind.SOURCE: "source.format",
    Kind.SINK: "sink.format",
    Kind.MODEL: "model.kind",
    Kind.EXECUTOR: "run.executor",
}


class ModelUri(StrEnum):
    """What a model plug-in's `model.uri` names, so a plan checks it without loading it."""

    FILE = "file"  # one local model file
    # `pkg.module:Class` or `path/file.py:Class`, built with the options its plug-in's
    # options model does not list as keyword arguments (checked against its source)
    CLASS = "class"
    FILE_OR_CLASS = "file-or-class"  # either: a class when the uri reads as one
    OTHER = "other"  # a folder, a hub name, a URL: the loader checks it


class PluginError(ThresherError):
    """A spec names a plug-in that is not there, or one that cannot be imported."""

    stage = "spec"


class Options(BaseModel):
    """Base of a plug-in's options model: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")


class NoOptions(Options):
    """The options of a plug-in that takes none: any key is an error."""


@dataclass(frozen=True)
class Plugin:
    """One plug-in: what it is, what a spec calls it, where its code is."""

    kind: Kind | str
    name: str
    factory: str  # "package.module:callable"
    options: str | None = None  # "package.module:OptionsModel"; None: options unchecked
    extra: str | None = None  # the thresher extra that installs what it imports
    # "package.module:function", called with the validated JobSpec of a job that uses the
    # plug-in: fills in what the plug-in implies (columns, options) in place, or raises
    # ValueError naming the field that contradicts it; run again, it changes nothing.
    completes: str | None = None
    # A source's: the sink format of a spec whose sink names none (else: the sink's own).
    sink_format: str | None = None
    model_uri: ModelUri = ModelUri.OTHER  # a model's: what its `model.uri` names
    # A sink's: the `sink.mode`s it writes (`merge`: upsert by the source's id column).
    modes: tuple[str, ...] = ("overwrite", "append")
    # A source's or sink's: its `uri` names a table in a catalog (`db.scores`), which a
    # spec file leaves as written instead of resolving it against the file's folder.
    table_uri: bool = False

    def builds_class(self, uri: str) -> bool:
        """Whether this model plug-in reads `uri` as a class to build, whose keyword
        arguments are the options its options model does not list."""
        if self.model_uri is ModelUri.CLASS:
            return True
        return self.model_uri is ModelUri.FILE_OR_CLASS and is_class_uri(uri)

    def load(self) -> Callable[..., Any]:
        """The factory, imported now. A missing dependency of a registered plug-in says
        what to install; a dotted path that does not import says why."""
        module_name, _, attribute = self.factory.partition(":")
        factory = getattr(self._module(module_name), attribute, None)
        if not callable(factory):
            raise PluginError(
                f"{Kind(self.kind).field}: {module_name} has no loader function {attribute!r}"
            )
        return factory  # type: ignore[no-any-return]

    def options_model(self) -> type[BaseModel] | None:
        if self.options is None:
            return None
        module_name, _, attribute = self.options.partition(":")
        model = getattr(self._module(module_name), attribute, None)
        if model is None:
            field = Kind(self.kind).field
            raise PluginError(f"{field}: {module_name} has no options model {attribute!r}")
        return model  # type: ignore[no-any-return]

    def completion(self) -> Callable[[Any], None] | None:
        """The `completes` hook, imported now; None if the plug-in has none."""
        if self.completes is None:
            return None
        module_name, _, attribute = self.completes.partition(":")
        hook = getattr(self._module(module_name), attribute, None)
        if not callable(hook):
            field = Kind(self.kind).field
            raise PluginError(f"{field}: {module_name} has no completion hook {attribute!r}")
        return hook  # type: ignore[no-any-return]

    def _module(self, name: str) -> Any:
        field = Kind(self.kind).field
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if self.factory == self.name:  # named by its dotted path, not registered
                raise PluginError(f"{field}: cannot import {name}: {exc}") from exc
            hint = f"pip install 'thresher[{self.extra}]'" if self.extra else f"install {exc.name}"
            raise PluginError(f"{field}: {self.name} needs {exc.name}; {hint}") from exc


def is_class_uri(uri: str) -> bool:
    """Whether `uri` reads as `pkg.module:Class` or `path/file.py:Class` (`Class` may be
    dotted), not as a file path or URL."""
    target, colon, attribute = uri.rpartition(":")
    if not colon or not target or "://" in uri:
        return False
    module = target.endswith(".py") or all(p.isidentifier() for p in target.split("."))
    return module and all(p.isidentifier() for p in attribute.split("."))


BUILTINS: tuple[Plugin, ...] = tuple(
    Plugin(**{**fields, "model_uri": ModelUri(fields["model_uri"])}) for fields in BUILTIN_PLUGINS
)


@functools.cache
def registry() -> Mapping[tuple[str, str], Plugin]:
    """Every plug-in by (kind, name): the built-ins, then the `thresher.plugins` entry
    points of installed packages (which may not take a built-in's name)."""
    found: dict[tuple[str, str], Plugin] = {(str(p.kind), p.name): p for p in BUILTINS}
    for point in entry_points(group=ENTRY_POINT_GROUP):
        declared = point.load()
        for plugin in declared if isinstance(declared, list | tuple) else [declared]:
            if not isinstance(plugin, Plugin):
                raise PluginError(
                    f"entry point {point.name} = {point.value!r} in {ENTRY_POINT_GROUP} is a "
                    f"{type(plugin).__name__}, not a thresher.plugins.Plugin"
                )
            key = (str(Kind(plugin.kind)), plugin.name)
            if key in found and found[key] in BUILTINS:
                raise PluginError(f"entry point {point.name}: {key[1]!r} is a built-in {key[0]}")
            found[key] = plugin
    return found


_BUILTIN_INDEX = {(str(p.kind), p.name): p for p in BUILTINS}


def lookup(kind: Kind, name: str) -> Plugin | None:
    """The registered plug-in of `kind` called `name`, or None. Built-ins are found
    without reading the installed packages' entry points, which costs a tenth of a second
    of every coordinator's and worker's start-up on a full environment."""
    return _BUILTIN_INDEX.get((str(kind), name)) or registry().get((str(kind), name))


def names(kind: Kind) -> list[str]:
    """The names a spec may give a plug-in of `kind`, built-ins first, in their order."""
    return [name for k, name in registry() if k == kind]


def find(kind: Kind, name: str) -> Plugin:
    """The plug-in a spec names: registered, or a dotted `package.module:callable`."""
    plugin = lookup(kind, name)
    if plugin is not None:
        return plugin
    if ":" in name:
        return Plugin(kind, name, name)
    raise PluginError(
        f"{kind.field}: unknown {kind} {name!r}; use one of {', '.join(sorted(names(kind)))},"
        " or one of your own as 'package.module:function'"
    )


def completion_hooks(used: Iterable[tuple[Kind, str | None]]) -> list[Callable[[Any], None]]:
    """The `completes` hooks of the registered plug-ins a spec uses, `used` = (kind,
    name) pairs, each hook once (a source and its sink may share one), in `used`'s
    order."""
    hooks: dict[str, Callable[[Any], None]] = {}
    for kind, name in used:
        plugin = lookup(kind, name) if name is not None else None
        hook = plugin.completion() if plugin is not None else None
        if plugin is not None and plugin.completes is not None and hook is not None:
            hooks.setdefault(plugin.completes, hook)
    return list(hooks.values())


def default_sink_format(raw: Any) -> Any:
    """A raw spec whose sink names no format, with the one its source plug-in gives
    (`Plugin.sink_format`); any other spec as it is."""
    if not isinstance(raw, dict):
        return raw
    source, sink = raw.get("source"), raw.get("sink")
    if not isinstance(source, dict) or not isinstance(sink, dict) or sink.get("format"):
        return raw
    plugin = lookup(Kind.SOURCE, str(source.get("format")))
    if plugin is None or plugin.sink_format is None:
        return raw
    return {**raw, "sink": {**sink, "format": plugin.sink_format}}


def option_problems(
    kind: Kind, name: str, options: Mapping[str, Any], field: str, uri: str = ""
) -> list[str]:
    """What is wrong with a plug-in's options, each naming its field (`field.key`). A
    model plug-in that builds the class `uri` names takes the options its model does not
    list as the class's arguments (`models.check_model_section` checks those)."""
    try:
        plugin = find(kind, name)
        model = plugin.options_model()
    except PluginError:
        return []  # the name itself is reported where it is checked
    if model is None:
        return []
    if plugin.builds_class(uri):
        options = {key: value for key, value in options.items() if key in model.model_fields}
    try:
        model.model_validate(dict(options))
    except ValidationError as exc:
        return [f"{field}.{problem}" for problem in describe_errors(exc, model)]
    return []


def sink_modes(name: str) -> tuple[str, ...]:
    """The modes sink `name` writes, its default first."""
    return find(Kind.SINK, name).modes


def check_sink_mode(name: str, mode: str) -> None:
    """Raise ValueError (a spec error at `mode`) for a mode sink `name` does not write;
    a sink named by dotted path writes the plain two."""
    plugin = find(Kind.SINK, name)
    if mode not in plugin.modes:
        raise ValueError(
            f"mode: the {name} sink does not write mode {mode!r}; use one of "
            f"{', '.join(repr(m) for m in plugin.modes)}"
        )


def check_plugin(
    kind: Kind, name: str, options: Mapping[str, Any], prefix: str = "format: "
) -> None:
    """Raise ValueError (a spec error at `prefix`) for a name that is neither a registered
    plug-in of `kind` nor a dotted path, or for options it does not take."""
    if ":" not in name and lookup(kind, name) is None:
        known = ", ".join(repr(n) for n in names(kind))
        raise ValueError(f"{prefix}must be one of {known}")
    problems = option_problems(kind, name, options, "options")
    if problems:
        raise ValueError("\n".join(problems))  # one problem a line
