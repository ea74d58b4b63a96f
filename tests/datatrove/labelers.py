"""Labelers that misbehave on purpose, by ``module:factory`` path, for the time-bound tests."""

from __future__ import annotations

import os
import time

from dripper.labelers.base import BlockLabeler, Labels


class MisbehavingLabeler(BlockLabeler):
    """Labels every block main, except that a page whose URL contains ``on`` makes it ``sleep`` for a
    minute, ``exit`` its process, or ``decline`` the page (to the fallback)."""

    name = "misbehaving"
    needs_block_text = False

    def __init__(self, on: str = "stall", mode: str = "sleep", log: str | None = None) -> None:
        super().__init__()
        self.on = on
        self.mode = mode
        self.log = log  # a file each labelled page's URL is appended to (from whichever process labels it)

    def label_batch(self, requests):
        for request in requests:
            if self.log:
                with open(self.log, "a", encoding="utf-8") as log:
                    log.write(f"{request.page.url}\n")
            if self.on in (request.page.url or "") and self.mode != "decline":
                if self.mode == "exit":
                    os._exit(3)
                time.sleep(60)
        return [
            Labels.failed("declined on purpose")  # mode "decline": the page goes to the fallback
            if self.mode == "decline" and self.on in (request.page.url or "")
            else Labels(main=[True] * request.simplified.n_blocks)
            for request in requests
        ]
