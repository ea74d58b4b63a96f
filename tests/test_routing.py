"""Cascade routing: which pages a budget or a threshold sends to the second labeler."""

from __future__ import annotations

import random

import pytest

from dripper.labelers.base import Labels
from dripper.routing import RoutePolicy, route_score, select_routed


def test_declined_pages_go_first_then_the_least_sure():
    keys = [(False, 0.9), (True, 0.95), (False, 0.2), (False, None), (False, 0.5)]
    assert select_routed(keys, RoutePolicy(share=0.6)) == [1, 3, 2]  # declined, no score (as 0), 0.2
    assert select_routed(keys, RoutePolicy(share=1.0)) == [1, 3, 2, 4, 0]
    assert select_routed(keys, RoutePolicy(below=0.6)) == [1, 3, 2, 4]
    assert select_routed(keys, RoutePolicy(below=0.0)) == [1, 3]


def test_a_share_holds_over_a_stream_of_batches():
    rng = random.Random(0)
    seen = routed = 0
    for size in [rng.randint(1, 40) for _ in range(200)]:
        chosen = select_routed(
            [(False, rng.random()) for _ in range(size)], RoutePolicy(share=0.3), seen, routed
        )
        seen, routed = seen + size, routed + len(chosen)
        assert abs(routed - 0.3 * seen) <= 0.5 + 1e-9
    assert len(select_routed([(False, 0.5)] * 10, RoutePolicy(share=0.34))) == 3


def test_the_score_is_the_route_score_else_the_page_confidence():
    assert route_score(Labels([True], page_confidence=0.8)) == 0.8
    assert route_score(Labels([True], page_confidence=0.8, route_score=0.1)) == 0.1
    assert route_score(Labels([True])) is None


@pytest.mark.parametrize(
    ("share", "below"), [(None, None), (0.3, 0.5), (0.0, None), (1.5, None), (None, 1.2)]
)
def test_a_policy_takes_one_valid_rule(share, below):
    with pytest.raises(ValueError):
        RoutePolicy(share=share, below=below)
