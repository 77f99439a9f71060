"""The one door for parameter values from outside: scenario files, ``-p`` overrides, API calls.

Every value a report is rendered with comes through here before papermill sees it, because
papermill writes values into the notebook as Python source: a ``str`` it escapes, but any other
type it writes as ``"{str(value)}"``, so a YAML ``!!set`` or ``!!binary`` whose text holds a
``"`` would close that string and run code in the kernel. And YAML aliases let a 6 KB file
stand for 10⁹ values, which papermill would spell out before any check runs.

So a value is admitted only when it is built from the types papermill writes faithfully —
``None``, ``bool``, ``int``, ``float``, ``str``, and lists and string-keyed mappings of them,
recursively — and stays within :data:`LIMITS` (input text, values after alias expansion, nesting
depth, string length, text in all, integer size). YAML is read by :func:`load_untrusted_yaml`, which refuses
any tag (``!!set``, ``!!binary``, ``!!python/object``, ``!custom``) and counts what aliases
expand to *while composing*, before anything is expanded, so an alias bomb is refused in
milliseconds. Refusals are :class:`~budgetlab.errors.ParameterError` naming the parameter, where
it came from and the rule.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import yaml

from budgetlab.errors import ParameterError

__all__ = [
    "LIMITS",
    "InputLimits",
    "admit_parameters",
    "admit_value",
    "load_untrusted_mapping",
    "load_untrusted_yaml",
]


@dataclass(frozen=True)
class InputLimits:
    """How much an untrusted value may hold; every bound is far above what any notebook takes.

    Attributes
    ----------
    max_text_bytes : int
        Longest YAML text, a scenario file or one ``-p`` value [bytes] (a scenario is ~2 KB).
    max_nodes : int
        Most values in one input, every list, mapping, key and scalar counted, aliases expanded
        [values] (the longest list a notebook takes has 64 entries).
    max_depth : int
        Deepest nesting of lists and mappings [levels] (notebooks take flat lists).
    max_string_chars : int
        Longest string [characters] (4,096: Linux's ``PATH_MAX``, the longest path a file
        parameter can name).
    max_total_chars : int
        Most characters in all the strings of one parameter's value together, keys included,
        aliases expanded [characters] (a 64 KB scenario could otherwise repeat one 4,096-character
        string 10,000 times through aliases: 41 MB of source papermill would write).
    max_int_bits : int
        Widest integer [bits] (a signed 64-bit count; 10**30 tokens is no deployment).
    """

    max_text_bytes: int = 64 * 1024
    max_nodes: int = 10_000
    max_depth: int = 16
    max_string_chars: int = 4096
    max_total_chars: int = 64 * 1024
    max_int_bits: int = 63


#: The limits every scenario file, ``-p`` value and API override is admitted under.
LIMITS = InputLimits()

_ALLOWED = "null, true/false, numbers, text, and lists or mappings (with text keys) of those"


class _Refused(Exception):
    """Raised inside the YAML loader; turned into a ParameterError with its context."""


def _refusal(name: str, origin: str, rule: str, fix: str) -> ParameterError:
    subject = f"parameter `{name}`" if name else "the YAML"
    where = f" from {origin}" if origin else ""
    return ParameterError(f"{subject}{where} is refused: {rule}. Fix: {fix}.")


# --------------------------------------------------------------------------------------------
# values already in Python (YAML results, API calls)
# --------------------------------------------------------------------------------------------


def admit_value(name: str, value: Any, *, origin: str = "", limits: InputLimits = LIMITS) -> Any:
    """``value`` if papermill can write it into a notebook faithfully, as plain types.

    Admits ``None``, ``bool``, ``int`` (at most ``limits.max_int_bits`` wide), ``float``, ``str``
    (at most ``limits.max_string_chars``, and ``limits.max_total_chars`` in all), and lists and
    ``str``-keyed dicts of those, at most ``limits.max_depth`` deep with at most
    ``limits.max_nodes`` values in all (a structure shared several times counts each time, a
    cycle is refused by its depth). A path (``os.PathLike``)
    becomes its string, a tuple a list, a NumPy scalar its Python value; everything else
    (sets, bytes, dates, objects, subclasses of ``str``) is refused.

    Parameters
    ----------
    name : str
        The parameter, named in the message.
    value : object
        What was passed.
    origin : str
        Where it came from (``"-p"``, ``"scenario params/x.yaml"``), named in the message.
    limits : InputLimits
        The bounds (:data:`LIMITS`).

    Returns
    -------
    object
        A fresh copy of plain types.

    Raises
    ------
    ParameterError
        Naming the parameter, the origin and the rule broken.
    """
    count = [0]
    chars = [0]

    def admit(item: Any, depth: int, where: str) -> Any:
        count[0] += 1
        if count[0] > limits.max_nodes:
            raise _refusal(
                name,
                origin,
                f"it holds more than {limits.max_nodes:,} values (lists, mappings and their entries; "
                "aliases or shared lists counted each time they appear)",
                "pass a short list of plain values",
            )
        kind = type(item)
        if item is None or kind in (bool, float):
            return item
        if kind is int:
            if item.bit_length() > limits.max_int_bits:
                raise _refusal(
                    name,
                    origin,
                    f"the integer{where} is wider than {limits.max_int_bits} bits (|n| < 2**{limits.max_int_bits}); "
                    "no count of tokens, requests or bytes is that large",
                    "pass a realistic number",
                )
            return item
        if kind is str:
            if len(item) > limits.max_string_chars:
                raise _refusal(
                    name,
                    origin,
                    f"the text{where} has {len(item):,} characters, more than {limits.max_string_chars:,} "
                    "(the longest path a file parameter can name)",
                    "pass a shorter value",
                )
            chars[0] += len(item)
            if chars[0] > limits.max_total_chars:
                raise _refusal(
                    name,
                    origin,
                    f"its texts hold more than {limits.max_total_chars:,} characters in all (aliases or "
                    "shared lists counted each time they appear)",
                    "pass a few short values",
                )
            return item
        if isinstance(item, os.PathLike):
            return admit(os.fspath(item), depth, where)
        if isinstance(item, np.generic):
            plain = item.item()  # a NumPy scalar: its Python bool, int, float or str
            if type(plain) in (bool, int, float, str):
                return admit(plain, depth, where)
        if kind in (list, tuple, dict):
            if depth >= limits.max_depth:
                raise _refusal(
                    name,
                    origin,
                    f"lists and mappings nest deeper than {limits.max_depth} levels{where}",
                    "pass a flat list or mapping",
                )
            if kind is dict:
                out: dict[str, Any] = {}
                for key, entry in item.items():
                    if type(key) is not str:
                        raise _refusal(
                            name,
                            origin,
                            f"a mapping{where} has the key {_short(key)} of type {type(key).__name__}, "
                            f"and mapping keys must be text; parameters may only be {_ALLOWED}",
                            "write the key as text",
                        )
                    admit(key, depth + 1, f"{where} key {_short(key)}")
                    out[key] = admit(entry, depth + 1, f"{where}[{_short(key)}]")
                return out
            return [admit(entry, depth + 1, f"{where}[{i}]") for i, entry in enumerate(item)]
        raise _refusal(
            name,
            origin,
            f"the value{where} is a {kind.__name__}"
            + (" (a YAML tag such as !!set or !!binary)" if kind in (set, frozenset, bytes) else "")
            + f", and parameters may only be {_ALLOWED}",
            "pass plain values (quote text in YAML)",
        )

    return admit(value, 0, "")


def admit_parameters(values: Mapping[str, Any], *, origin: str = "", limits: InputLimits = LIMITS) -> dict[str, Any]:
    """:func:`admit_value` for each of ``values``, whose keys must be parameter names.

    Raises
    ------
    ParameterError
        A key that is not a Python identifier, or a value :func:`admit_value` refuses.
    """
    admitted: dict[str, Any] = {}
    for name, value in values.items():
        if type(name) is not str or not name.isidentifier():
            where = f" from {origin}" if origin else ""
            raise ParameterError(
                f"parameter name {_short(name)}{where} is refused: a parameter name is a Python "
                "identifier (letters, digits, underscores). Fix: use a name the notebook declares."
            )
        admitted[name] = admit_value(name, value, origin=origin, limits=limits)
    return admitted


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# --------------------------------------------------------------------------------------------
# YAML text
# --------------------------------------------------------------------------------------------


def _libyaml_base() -> type:
    """libyaml's fast parser under PyYAML's (countable) composer, or the pure-Python loader."""
    c_parser: Any = getattr(getattr(yaml, "cyaml", None), "CParser", None)
    if c_parser is None:  # PyYAML built without libyaml
        return yaml.SafeLoader
    composer, constructor, resolver = yaml.composer.Composer, yaml.constructor.SafeConstructor, yaml.resolver.Resolver

    class _Base(composer, c_parser, constructor, resolver):  # type: ignore[misc,valid-type]
        def __init__(self, stream: str) -> None:
            c_parser.__init__(self, stream)
            composer.__init__(self)
            constructor.__init__(self)
            resolver.__init__(self)

    return _Base


#: The mixin's base: ``object`` (it sits before a real loader in the MRO, see :func:`_bounded`),
#: typed ``Any`` so the loader methods it calls type-check.
_MixinBase: Any = object


class _Counting(_MixinBase):
    """Mixed in before a safe loader: refuses tags and counts values (aliases expanded) while
    composing, before the constructor expands anything."""

    anchors: dict[str, Any]

    def __init__(self, stream: str, limits: InputLimits) -> None:
        super().__init__(stream)
        self._limits = limits
        self._depth = 0
        self._total = 0
        self._expanded: dict[int, int] = {}  # id(node) → values it stands for, aliases expanded

    def _count(self, values: int, event: yaml.Event) -> None:
        self._total += values
        if self._total > self._limits.max_nodes:
            raise _Refused(
                f"it holds more than {self._limits.max_nodes:,} values (at {_position(event)}; every list, "
                "mapping, key and entry counts, and an alias *name counts as all that its anchor &name "
                "holds, so a few lines of aliases cannot stand for billions of values)"
            )

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            node = self.anchors.get(event.anchor)
            if node is not None:
                size = self._expanded.get(id(node))
                if size is None:
                    raise _Refused(
                        f"the alias *{event.anchor} at {_position(event)} refers to a list or mapping it sits in"
                    )
                self._count(size, event)
            return super().compose_node(parent, index)
        if event.tag is not None:
            shown = event.tag.replace("tag:yaml.org,2002:", "!!", 1)
            raise _Refused(
                f"it carries the YAML tag {shown} (at {_position(event)}); tags such as !!set, !!binary "
                "or !!python/object build types a notebook cannot take safely"
            )
        if isinstance(event, yaml.ScalarEvent) and len(event.value) > self._limits.max_string_chars:
            raise _Refused(
                f"a text at {_position(event)} has {len(event.value):,} characters, more than "
                f"{self._limits.max_string_chars:,} (the longest path a file parameter can name)"
            )
        nested = isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent))
        if nested:
            self._depth += 1
            if self._depth > self._limits.max_depth:
                raise _Refused(
                    f"lists and mappings nest deeper than {self._limits.max_depth} levels (at {_position(event)})"
                )
        start = self._total
        self._count(1, event)
        try:
            node = super().compose_node(parent, index)
        finally:
            if nested:
                self._depth -= 1
        self._expanded[id(node)] = self._total - start
        return node


def _bounded(base: type) -> type:
    """``base`` (a safe loader) with the counting composer, dates and ``=`` kept as text: only
    the types :func:`admit_value` takes come out of it."""
    resolvers = {
        first: [(tag, pattern) for tag, pattern in pairs if tag not in (_TIMESTAMP, _VALUE)]
        for first, pairs in yaml.resolver.Resolver.yaml_implicit_resolvers.items()
    }
    return type(f"Bounded{base.__name__}", (_Counting, base), {"yaml_implicit_resolvers": resolvers})


_TIMESTAMP, _VALUE = "tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:value"
_BoundedLoader = _bounded(_libyaml_base())


def _position(event: yaml.Event) -> str:
    mark = event.start_mark
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "an unknown position"


def _load_bounded(text: str, *, name: str, origin: str, limits: InputLimits) -> Any:
    """The YAML's value, built only after the size, tag, depth and alias checks passed."""
    size_bytes = len(text.encode("utf-8", errors="surrogatepass"))
    if size_bytes > limits.max_text_bytes:
        raise _refusal(
            name,
            origin,
            f"its YAML text has {size_bytes:,} bytes, more than {limits.max_text_bytes:,}",
            "keep a scenario to its parameters (a few KB)",
        )
    loader = _BoundedLoader(text, limits)
    try:
        return loader.get_single_data()
    except _Refused as exc:
        raise _refusal(name, origin, str(exc), "write plain YAML values: numbers, quoted text, [lists]") from None
    except RecursionError:  # unreachable within max_depth; kept so no input can crash the caller
        raise _refusal(name, origin, "its YAML nests too deeply", "pass a flat value") from None
    finally:
        loader.dispose()


def load_untrusted_yaml(text: str, *, name: str, origin: str = "", limits: InputLimits = LIMITS) -> Any:
    """Parse one value from outside (a ``-p`` value) as YAML, within ``limits``.

    The text must be at most ``limits.max_text_bytes`` long; no node may carry a tag; aliases
    are counted by what they expand to, and nesting by depth, before any value is built
    (dates and ``=`` stay text); the result then passes :func:`admit_value`.

    Parameters
    ----------
    text : str
        The YAML.
    name : str
        The parameter, for messages.
    origin : str
        Where it came from (``"-p"``), for messages.
    limits : InputLimits
        The bounds (:data:`LIMITS`).

    Returns
    -------
    object
        Plain types only (see :func:`admit_value`).

    Raises
    ------
    ParameterError
        The text breaks a limit or carries a tag (the message names the rule and the position).
    yaml.YAMLError
        The text is not YAML (the caller decides: ``-p`` keeps it as text).
    """
    value = _load_bounded(text, name=name, origin=origin, limits=limits)
    return admit_value(name, value, origin=origin, limits=limits)


def load_untrusted_mapping(text: str, *, origin: str, limits: InputLimits = LIMITS) -> dict[str, Any]:
    """Parse a scenario: YAML text holding a mapping of parameter name → value (empty → ``{}``).

    The same checks as :func:`load_untrusted_yaml`, over the whole text; then each entry passes
    :func:`admit_parameters`, so a refusal names the parameter.

    Raises
    ------
    ParameterError
        A limit broken, a tag, a top level that is not a mapping, or a key that is not a name.
    yaml.YAMLError
        The text is not YAML.
    """
    value = _load_bounded(text, name="", origin=origin, limits=limits)
    if value is None:
        return {}
    if type(value) is not dict:
        raise ParameterError(
            f"{origin} must be a mapping of parameter name to value, got a {type(value).__name__}. "
            "Fix: write one `name: value` per line."
        )
    return admit_parameters(value, origin=origin, limits=limits)
