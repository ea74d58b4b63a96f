"""Cascade routing: which pages a first labeler's answers send to a second labeler.

A cascade (an extractor spec with a ``route``, :class:`dripper.config.extractor.RouteSpec`) labels
every page with a cheap labeler and sends the pages it is least sure of to an expensive one. The ranking
key of a page is its *routing score* (:func:`route_score`: the first labeler's ``route_score``, else its
``page_confidence``; low means unsure); pages the first labeler declined come first whatever their score.
:func:`select_routed` applies a policy to one population of pages: the pipeline calls it per batch with
the counts carried over the stream, the extract stage once per shard.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from dripper.labelers.base import Labels

__all__ = ["RouteCounts", "RoutePolicy", "route_score", "select_routed"]


@dataclass(frozen=True)
class RoutePolicy:
    """Which pages go to the second labeler: a budget (``share``) or a threshold (``below``), not both.

    Attributes:
        share: The least sure share of the pages, in (0, 1]; held over the whole population (see
            :func:`select_routed`).
        below: Every page scored below this, in [0, 1], and every declined page.
    """

    share: float | None = None
    below: float | None = None

    def __post_init__(self) -> None:
        if (self.share is None) == (self.below is None):
            raise ValueError("a route takes exactly one of share and below")
        if self.share is not None and not 0 < self.share <= 1:
            raise ValueError(f"route share must be in (0, 1], got {self.share}")
        if self.below is not None and not 0 <= self.below <= 1:
            raise ValueError(f"route below must be in [0, 1], got {self.below}")


def route_score(labels: Labels) -> float | None:
    """A first answer's routing score: ``route_score`` when the labeler gives one, else ``page_confidence``
    (``None`` when it gives neither: such pages rank as score 0)."""
    return labels.route_score if labels.route_score is not None else labels.page_confidence


@dataclass
class RouteCounts:
    """What a cascade routed so far: pages scored and routed, and their prompt tokens (estimated without a
    tokenizer, :func:`dripper.prompt.prompt_tokens_estimate`, the same for every page)."""

    pages: int = 0
    routed: int = 0
    declined: int = 0
    prompt_tokens: int = 0
    routed_prompt_tokens: int = 0
    route_failed: int = 0

    def as_dict(self) -> dict[str, float | int]:
        return {
            "pages_scored": self.pages,
            "pages_routed": self.routed,
            "declined": self.declined,
            "share_routed": round(self.routed / self.pages, 4) if self.pages else 0.0,
            "prompt_tokens_estimate": self.prompt_tokens,
            "routed_prompt_tokens_estimate": self.routed_prompt_tokens,
            "token_share_routed": (
                round(self.routed_prompt_tokens / self.prompt_tokens, 4) if self.prompt_tokens else 0.0
            ),
            "route_failed": self.route_failed,
        }


def _rank_key(declined: bool, score: float | None, index: int) -> tuple[int, float, int]:
    return (0 if declined else 1, 0.0 if score is None else score, index)


def select_routed(
    keys: Sequence[tuple[bool, float | None]],
    policy: RoutePolicy,
    seen_before: int = 0,
    routed_before: int = 0,
) -> list[int]:
    """The indices of the pages to route, least sure first.

    Args:
        keys: Per page ``(declined, score)``: whether the first labeler declined it, its routing score.
        policy: The route's rule.
        seen_before: Pages of the same stream scored in earlier calls (``share`` only).
        routed_before: Of those, how many were routed.

    With ``share``, the call routes its least sure pages so that the stream's routed count reaches
    ``round(share × (seen_before + len(keys)))``: over many batches the share holds to within one page,
    and a single call (a shard) routes exactly its rounded share.
    """
    order = sorted(range(len(keys)), key=lambda i: _rank_key(keys[i][0], keys[i][1], i))
    if policy.below is not None:
        return [i for i in order if keys[i][0] or keys[i][1] is None or keys[i][1] < policy.below]
    target = math.floor(policy.share * (seen_before + len(keys)) + 0.5)
    quota = min(len(keys), max(0, target - routed_before))
    return order[:quota]
