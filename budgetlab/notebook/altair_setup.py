"""The Altair renderer that budgetlab notebooks use, so every chart draws with no network:
live in JupyterLab, Notebook 7 and VS Code, and in the offline HTML reports.

Call :func:`use_offline_renderer` once, in a notebook's imports cell::

    from budgetlab.notebook import use_offline_renderer
    use_offline_renderer()

(``budgetlab.notebook.reports.use_offline_renderer`` is the same function.)

Why a renderer of our own
-------------------------
Altair's stock renderers do not fit a notebook that must work offline:

* ``default``/``html`` emit ``text/html`` whose script loads Vega from a CDN: with no network
  the chart shows ``Error loading script`` in JupyterLab, and nothing in an offline report.
* ``html`` with ``template='inline'`` pastes the 900 kB Vega bundle into *every* chart; the
  bundle declares top-level ``const`` names, so the second copy throws and only the first
  chart draws.
* ``mimetype`` (altair 6) emits ``application/vnd.vegalite.v6.json`` holding a JSON object;
  the mime type does not end in ``+json``, so nbformat rejects the executed notebook and
  papermill fails while saving it. No JupyterLab release renders Vega-Lite 6 either: its
  built-in ``@jupyterlab/vega5-extension`` (JupyterLab 4.0–4.6) renders
  ``application/vnd.vega.v5+json`` and Vega-Lite 3 to 5, with Vega 5 it carries itself.

The ``budgetlab`` renderer registered here returns one display bundle with

``application/vnd.vegalite.v<N>+json``
    the chart's Vega-Lite spec as JSON (a valid nbformat output because of the ``+json``
    suffix). The nbconvert template in ``budgetlab/notebook/templates/offline`` turns each one into a
    ``<div class="budgetlab-vega">`` and embeds it with the Vega/Vega-Lite/Vega-Embed bundle
    from ``vl_convert.javascript_bundle()``, inlined once per page.
``application/vnd.vega.v5+json``
    the same chart compiled offline to a Vega 5 spec by ``vl_convert`` with its newest
    Vega-Lite 5 compiler (:func:`vega5_spec`). JupyterLab, Notebook 7 and VS Code draw this
    with the Vega they ship: no script is loaded, so nothing needs the network, and the
    output is drawn again when a saved notebook is reopened (Vega output is "safe", so it
    needs no trust).
``text/plain``
    A one-line fallback.

There is deliberately no ``text/html``: JupyterLab prefers HTML (rank 50) to Vega (rank 57),
so any HTML in the bundle would be drawn instead of the chart. A front end with no Vega
renderer at all (nbclassic 6, a plain IPython terminal) shows the one-line text.

The spec's embed options (``alt.renderers.set_embed_options``) travel in the output metadata
under both JSON mime types, where the report template and JupyterLab's renderer read them.
Charts with parameters bound to inputs (sliders, dropdowns) and selections keep working: the
spec is drawn by Vega-Embed in the page, not as a static image.
"""

from __future__ import annotations

import warnings
from functools import cache
from typing import Any

__all__ = [
    "RENDERER_NAME",
    "VEGA5_MIMETYPE",
    "offline_renderer",
    "use_offline_renderer",
    "vega5_spec",
    "vegalite_mimetype",
]

RENDERER_NAME = "budgetlab"

#: The mime type JupyterLab 4, Notebook 7 and VS Code draw with the Vega 5 they ship.
VEGA5_MIMETYPE = "application/vnd.vega.v5+json"


def vegalite_mimetype() -> str:
    """The JSON mime type charts are stored under, e.g. ``application/vnd.vegalite.v6+json``.

    The major version follows the installed Altair's Vega-Lite schema.
    """
    import altair as alt

    major = str(alt.SCHEMA_VERSION).lstrip("v").split(".")[0]
    return f"application/vnd.vegalite.v{major}+json"


@cache
def _vegalite5_compiler() -> str:
    """The newest Vega-Lite 5 release ``vl_convert`` carries, e.g. ``"5.21"``."""
    import vl_convert

    fives = [v for v in vl_convert.get_vegalite_versions() if v.split(".")[0] == "5"]
    if not fives:  # pragma: no cover - every vl-convert release from 1.7 on has some
        raise RuntimeError("this vl-convert-python carries no Vega-Lite 5 compiler; install vl-convert-python>=1.7")
    return max(fives, key=lambda v: tuple(int(part) for part in v.split(".")))


def vega5_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """Compile a Vega-Lite spec to the Vega 5 spec that JupyterLab's own Vega draws.

    Parameters
    ----------
    spec : dict
        A Vega-Lite spec, data inlined (Altair's ``to_dict()``); Vega-Lite 5 or 6.

    Returns
    -------
    dict
        A Vega 5 spec (``$schema`` ``https://vega.github.io/schema/vega/v5.json``); bound
        parameters become signals with a ``bind``, so sliders and dropdowns keep working.

    Raises
    ------
    ValueError
        When the Vega-Lite 5 compiler cannot compile the spec (a Vega-Lite 6-only feature).

    Notes
    -----
    Compiled in-process by ``vl_convert`` (a bundled Deno runtime), with no network; the first
    call in a process takes about 0.7 s to start the runtime, later ones a few milliseconds.
    """
    import vl_convert

    return vl_convert.vegalite_to_vega(spec, vl_version=_vegalite5_compiler())


def offline_renderer(spec: dict[str, Any], **metadata: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Altair renderer: Vega-Lite JSON for the report template, Vega 5 JSON for live notebooks.

    Parameters
    ----------
    spec : dict
        The chart's Vega-Lite spec, data inlined (Altair's ``to_dict()``).
    **metadata
        Renderer options; ``embed_options`` (a dict of Vega-Embed options) is kept for the
        report template and JupyterLab.

    Returns
    -------
    (dict, dict)
        The display bundle and its metadata, as IPython's ``_repr_mimebundle_`` expects.
        When the spec cannot be compiled to Vega 5 the bundle has no Vega 5 entry and a
        :class:`UserWarning` says why (the offline report still draws the chart).
    """
    import altair as alt

    mime = vegalite_mimetype()
    bundle: dict[str, Any] = {mime: spec}
    if mime != VEGA5_MIMETYPE:
        try:
            bundle[VEGA5_MIMETYPE] = vega5_spec(spec)
        except ValueError as error:
            warnings.warn(
                f"this chart cannot be compiled for JupyterLab's Vega 5, so it will only draw in the "
                f"rendered report: {error}",
                UserWarning,
                stacklevel=2,
            )
    bundle["text/plain"] = f"<VegaLite {alt.SCHEMA_VERSION} chart>"
    embed_options = metadata.get("embed_options") or {}
    chart_metadata = {"embed_options": embed_options}
    return bundle, ({key: chart_metadata for key in bundle if key != "text/plain"} if embed_options else {})


def use_offline_renderer() -> None:
    """Register and enable the ``budgetlab`` Altair renderer.

    Safe to call more than once. Returns nothing, so the imports cell shows no output.
    Embed options set earlier with ``alt.renderers.set_embed_options`` are not kept: set them
    after this call.
    """
    import altair as alt

    if RENDERER_NAME not in alt.renderers.names():
        alt.renderers.register(RENDERER_NAME, offline_renderer)
    alt.renderers.enable(RENDERER_NAME)
