"""A multimodal checkpoint's vision encoder, as vLLM loads it and profiles it at start-up.

vLLM serves Gemma 3 (``Gemma3ForConditionalGeneration``) and Llama 4 (``Llama4ForConditional
Generation``) with their vision encoder and projector loaded beside the text model, so the
"Model loading took" line includes them; and its profile run (vLLM 0.19
``gpu_model_runner.profile_run``) first encodes a batch of dummy images of the largest size and
keeps their outputs in the encoder cache, and the batched pixel values alive, through the text
model's dummy forward and sampler passes. :class:`VisionEncoder` holds the three numbers that
memory needs (:func:`budgetlab.memory.vision_weight_bytes`,
:func:`budgetlab.memory.activation_peak`); the catalog's ``vision`` column writes it as
:meth:`VisionEncoder.to_text` does (``params=419816304; tokens_per_item=256;
pixels_per_item=2408448``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from budgetlab._checks import int_at_least
from budgetlab.errors import ConfigError

__all__ = ["VisionEncoder"]


@dataclass(frozen=True)
class VisionEncoder:
    """The vision encoder of a multimodal model.

    Attributes
    ----------
    params : int
        Parameters of the encoder and its projector [count], loaded in the model dtype and,
        like the text model, split over tensor parallelism (vLLM's default
        ``mm_encoder_tp_mode="weights"``); not in :attr:`ModelSpec.num_params
        <budgetlab.specs.ModelSpec.num_params>`. Gemma 3 4B: 419,816,304 (SigLIP 416,866,032
        and the projector).
    tokens_per_item : int
        Embeddings the largest image gives the text model [count]: Gemma 3's
        ``mm_tokens_per_image`` (256, without pan-and-scan); Llama 4 Scout 17 tiles (16 and the
        global one) × 144 = 2,448.
    pixels_per_item : int
        Pixel values of the largest image as the processor hands it to the encoder [count]:
        ``3 × 896²`` = 2,408,448 for Gemma 3, ``17 × 3 × 336²`` = 5,757,696 for Llama 4 Scout.

    Raises
    ------
    ConfigError
        A field that is not an int >= 1.
    """

    params: int
    tokens_per_item: int
    pixels_per_item: int

    def __post_init__(self) -> None:
        for f in fields(self):
            int_at_least(f.name, getattr(self, f.name), 1, what="an int >= 1", error=ConfigError)

    def to_text(self) -> str:
        """The catalog's form: ``params=…; tokens_per_item=…; pixels_per_item=…``."""
        return "; ".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self))

    @classmethod
    def parse(cls, text: str) -> VisionEncoder:
        """Read :meth:`to_text`'s form back.

        Raises
        ------
        ConfigError
            A part that is not ``name=integer`` or a missing or unknown name (the message names
            the expected ones).
        """
        names = [f.name for f in fields(cls)]
        values: dict[str, int] = {}
        for part in (p.strip() for p in text.split(";") if p.strip()):
            name, _, value = part.partition("=")
            name = name.strip()
            if name not in names or not value.strip().isdigit():
                raise ConfigError(f"vision: expected {'; '.join(n + '=<int>' for n in names)}, got {text!r}")
            values[name] = int(value)
        if set(values) != set(names):
            raise ConfigError(f"vision: needs {', '.join(names)}; got {text!r}")
        return cls(**values)
