"""Checks of :class:`~budgetlab.specs.EngineConfig`'s CUDA-graph fields, as vLLM makes them.

Kept apart from :mod:`budgetlab.specs` so that module holds the descriptions; the rules are
vLLM 0.33's ``VllmConfig._set_cudagraph_sizes`` (restated in :mod:`budgetlab.cudagraph`).
"""

from __future__ import annotations

from typing import Any

from budgetlab._checks import int_at_least
from budgetlab.errors import ConfigError

__all__ = ["check_cudagraph_fields", "check_formats"]


def check_cudagraph_fields(engine: Any) -> None:
    """Check ``cudagraph_capture_sizes`` and ``max_cudagraph_capture_size`` of an engine
    config, and store the sizes as a tuple of ints.

    Raises
    ------
    ConfigError
        Sizes that are not a non-empty sequence of positive ints (empty is allowed with
        ``enforce_eager``), or a ``max_cudagraph_capture_size`` that disagrees with the largest
        size within the budget, as vLLM requires.
    """
    sizes, top = engine.cudagraph_capture_sizes, engine.max_cudagraph_capture_size
    if sizes is not None:
        if not isinstance(sizes, list | tuple) or not (sizes or engine.enforce_eager):
            raise ConfigError(f"cudagraph_capture_sizes must be None or a non-empty tuple of ints, got {sizes!r}")
        sizes = tuple(int_at_least("a cudagraph_capture_sizes entry", n, error=ConfigError) for n in sizes)
        object.__setattr__(engine, "cudagraph_capture_sizes", sizes)
    if top is not None:
        int_at_least("max_cudagraph_capture_size", top, what="an int >= 1 [tokens] or None", error=ConfigError)
        largest = max((n for n in sizes or () if n <= engine.max_num_batched_tokens), default=0)
        if sizes is not None and not engine.enforce_eager and top != largest:
            raise ConfigError(
                f"max_cudagraph_capture_size ({top}) must equal the largest cudagraph_capture_sizes entry "
                f"within the budget ({largest}), as vLLM requires; set only one of the two or make them agree."
            )


def check_formats(engine: Any, *, dtypes: tuple, kv_cache_dtypes: tuple, quantizations: tuple) -> None:
    """Check an engine config's ``dtype``, ``kv_cache_dtype`` and ``quantization`` against the
    values :mod:`budgetlab.specs` allows.

    Raises
    ------
    ConfigError
        A value not in its list; the message names the list and vLLM's flag.
    """
    for name, allowed, flag_name in (
        ("dtype", dtypes, "--dtype"),
        ("kv_cache_dtype", kv_cache_dtypes, "--kv-cache-dtype"),
        ("quantization", quantizations, "weight format: fp8, W8A8 int8, 4-bit GPTQ/AWQ/W4A16, MXFP4 or NVFP4"),
    ):
        value = getattr(engine, name)
        if not any(value is option or (isinstance(value, str) and value == option) for option in allowed):
            names = ", ".join(repr(option) for option in allowed)
            where = flag_name if flag_name.startswith("weight") else f"vLLM's {flag_name}"
            raise ConfigError(f"{name} must be one of {names} ({where}), got {value!r}")
