"""What one engine step processes: the argument of every cost model's ``batch_time_s``.

The simulator builds one :class:`Batch` a step from the chunks it scheduled; the cost models
(:mod:`budgetlab.cost`) price it. Re-exported by :mod:`budgetlab.specs` and the package.
"""

from __future__ import annotations

from dataclasses import dataclass

from budgetlab._checks import int_at_least

__all__ = ["Batch"]


@dataclass(frozen=True, slots=True)
class Batch:
    """The composition of one step: what the forward pass processes.

    Attributes
    ----------
    num_decodes : int
        Decoding sequences [count]: one token each, plus the drafts a verifying decode checks.
    decode_context_tokens : int
        Sum over those decodes of the tokens already in their KV cache [tokens].
    prefill_tokens : tuple of int
        One entry per prefill (or recompute) chunk: its length [tokens].
    prefill_context_tokens : tuple of int
        For each chunk, the tokens of the same request already in the KV cache [tokens]
        (0 for a first chunk; a later chunk attends to all earlier ones).
    decode_draft_tokens : int
        Speculative decoding: the draft tokens the decodes verify, all together [tokens]. A
        decode verifying ``d`` drafts runs ``1 + d`` query tokens through the target model
        (vLLM's ``num_scheduled_tokens`` for it); 0 without speculation.

    Raises
    ------
    ValueError
        A count that is not an int >= 0 (a bool, a float, NaN or a string included), chunk
        lists that are not tuples, or not one context entry per chunk. The simulator builds one
        ``Batch`` a step with Python ints, so the check tests ``type(x) is int`` inline first.
    """

    num_decodes: int = 0
    decode_context_tokens: int = 0
    prefill_tokens: tuple[int, ...] = ()
    prefill_context_tokens: tuple[int, ...] = ()
    decode_draft_tokens: int = 0

    def __post_init__(self) -> None:
        decodes, context, drafts = self.num_decodes, self.decode_context_tokens, self.decode_draft_tokens
        chunks, contexts = self.prefill_tokens, self.prefill_context_tokens
        if (
            type(decodes) is not int
            or type(context) is not int
            or type(drafts) is not int
            or decodes < 0
            or context < 0
            or drafts < 0
            or type(chunks) is not tuple
            or type(contexts) is not tuple
            or len(chunks) != len(contexts)
        ):
            self._refuse()
        for n in chunks:
            if type(n) is not int or n < 0:
                self._refuse()
        for n in contexts:
            if type(n) is not int or n < 0:
                self._refuse()

    def _refuse(self) -> None:
        """The slow path of the check: accept NumPy ints, else ``ValueError`` naming the field."""
        for name in ("num_decodes", "decode_context_tokens", "decode_draft_tokens"):
            int_at_least(name, getattr(self, name), 0, what="an int >= 0", error=ValueError)
        for name in ("prefill_tokens", "prefill_context_tokens"):
            values = getattr(self, name)
            if not isinstance(values, tuple):
                raise ValueError(f"{name} must be a tuple of ints >= 0 [tokens], got {values!r}")
            for i, value in enumerate(values):
                int_at_least(f"{name}[{i}]", value, 0, what="an int >= 0 [tokens]", error=ValueError)
        if len(self.prefill_tokens) != len(self.prefill_context_tokens):
            raise ValueError(
                f"Batch has {len(self.prefill_tokens)} prefill chunks but "
                f"{len(self.prefill_context_tokens)} context entries; give one "
                "prefill_context_tokens entry per chunk"
            )

    @property
    def num_tokens(self) -> int:
        """Tokens the step processes [tokens]."""
        return self.num_decodes + self.decode_draft_tokens + sum(self.prefill_tokens)
