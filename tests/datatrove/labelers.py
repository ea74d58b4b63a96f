"""Labelers that misbehave on purpose, by ``module:factory`` path, for the time-bound tests."""

from __future__ import annotations

import os
import time

from dripper.labelers.base import BlockLabeler, Labels


class MisbehavingLabeler(BlockLabeler):
    """Labels every block main, except that a page whose URL contains ``on`` makes it ``sleep`` for a
    minute or ``exit`` its process."""

    name = "misbehaving"
    needs_block_text = False

    def __init__(self, on: str = "stall", mode: str = "sleep") -> None:
        super().__init__()
        self.on = on
        self.mode = mode

    def label_batch(self, requests):
        for request in requests:
            if self.on in (request.page.url or ""):
                if self.mode == "exit":
                    os._exit(3)
                time.sleep(60)
        return [Labels(main=[True] * request.simplified.n_blocks) for request in requests]
