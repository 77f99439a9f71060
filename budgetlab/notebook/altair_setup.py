"""The Altair renderer that budgetlab notebooks use, so every chart works in offline reports.

Call :func:`use_offline_renderer` once, in a notebook's imports cell::

    from budgetlab.notebook import use_offline_renderer
    use_offline_renderer()

(``budgetlab.notebook.reports.use_offline_renderer`` is the same function.)

Why a renderer of our own
-------------------------
Altair's stock renderers do not fit a papermill → offline-HTML pipeline:

* ``default``/``html`` emit ``text/html`` whose script loads Vega from a CDN: an offline report
  shows no chart.
* ``html`` with ``template='inline'`` pastes the 900 kB Vega bundle into *every* chart; the
  bundle declares top-level ``const`` names, so the second copy throws and only the first
  chart draws.
* ``mimetype`` (altair 6) emits ``application/vnd.vegalite.v6.json`` holding a JSON object;
  the mime type does not end in ``+json``, so nbformat rejects the executed notebook and
  papermill fails while saving it.

The ``budgetlab`` renderer registered here returns one display bundle with

``application/vnd.vegalite.v<N>+json``
    the chart's Vega-Lite spec as JSON (a valid nbformat output because of the ``+json``
    suffix). The nbconvert template in ``budgetlab/notebook/templates/offline`` turns each one into a
    ``<div class="budgetlab-vega">`` and embeds it with the Vega/Vega-Lite/Vega-Embed bundle
    from ``vl_convert.javascript_bundle()``, inlined once per page.
    The spec's embed options (``alt.renderers.set_embed_options``) travel in the output
    metadata under the same mime type.
``text/html``
    Altair's own HTML (the ``default`` renderer's output), so the chart still shows live in
    JupyterLab, VS Code or classic Notebook, exactly as with Altair's default renderer.
``text/plain``
    A one-line fallback.

Charts with parameters bound to inputs (sliders, dropdowns) and selections keep working: the
spec is rendered by Vega-Embed in the page, not as a static image.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RENDERER_NAME", "use_offline_renderer", "vegalite_mimetype", "offline_renderer"]

RENDERER_NAME = "budgetlab"


def vegalite_mimetype() -> str:
    """The JSON mime type charts are stored under, e.g. ``application/vnd.vegalite.v6+json``.

    The major version follows the installed Altair's Vega-Lite schema.
    """
    import altair as alt

    major = str(alt.SCHEMA_VERSION).lstrip("v").split(".")[0]
    return f"application/vnd.vegalite.v{major}+json"


def offline_renderer(spec: dict[str, Any], **metadata: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Altair renderer: Vega-Lite JSON for the offline report template plus Altair's HTML.

    Parameters
    ----------
    spec : dict
        The chart's Vega-Lite spec, data inlined (Altair's ``to_dict()``).
    **metadata
        Renderer options; ``embed_options`` (a dict of Vega-Embed options) is kept for the
        report template.

    Returns
    -------
    (dict, dict)
        The display bundle and its metadata, as IPython's ``_repr_mimebundle_`` expects.
    """
    import altair as alt
    from altair.utils.display import HTMLRenderer

    mime = vegalite_mimetype()
    html = HTMLRenderer(
        mode="vega-lite",
        template="universal",
        vega_version=alt.VEGA_VERSION,
        vegaembed_version=alt.VEGAEMBED_VERSION,
        vegalite_version=alt.VEGALITE_VERSION,
    )(spec, **metadata)
    bundle: dict[str, Any] = {
        mime: spec,
        "text/html": html["text/html"],
        "text/plain": f"<VegaLite {alt.SCHEMA_VERSION} chart>",
    }
    embed_options = metadata.get("embed_options") or {}
    return bundle, ({mime: {"embed_options": embed_options}} if embed_options else {})


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
