"""How the CPU labeler turns block probabilities into main/other labels.

Two rules, named in the model file (``decision``) and overridable per labeler:

- ``threshold``: a block is main when its probability reaches the model's threshold.
- ``expected_f1``: the page's main set is the one that maximises its expected character F1 under the
  model's probabilities: blocks are taken likeliest first while that expectation grows. This is the
  threshold that fits each page (a block is worth taking while its probability exceeds about half the F1
  still reachable), so a page the model is sure of keeps a tight cut near 0.5 and a page it is unsure of,
  typically a kind of page it has not seen, takes more of its likely text rather than a fragment.
  Out of fold it is worth +0.002 to +0.003 of ROUGE-5 on articles and costs as much on dev_hard
  (Dragnet's reader comments); grouped by source, +0.019 of block-level F1 on the hard pages (docs/history.md).

Either way a page with text never comes back empty, and blocks without text (images, embeds) follow
their neighbours.
"""

from __future__ import annotations

import numpy as np

from dripper.labelers.base import Labels

__all__ = [
    "DECISIONS",
    "RELATIVE_THRESHOLD",
    "check_decision",
    "check_gate",
    "check_settings",
    "check_threshold",
    "expected_f1",
    "expected_f1_main",
    "finish_labels",
]

#: The decision rules a model file or a labeler may name.
DECISIONS = ("threshold", "expected_f1")
#: With ``threshold``, when no block with text reaches it, blocks within this share of the best are main.
RELATIVE_THRESHOLD = 0.7


def check_decision(decision: str) -> str:
    """``decision`` when it names a rule of :data:`DECISIONS`; a ``ValueError`` naming them otherwise."""
    if decision not in DECISIONS:
        raise ValueError(f"decision {decision!r}: choose one of {DECISIONS}")
    return decision


def check_gate(name: str, value: float) -> float:
    """``value`` as a float when it is a gate in [0, 1) (0 turns the gate off); a ``ValueError`` otherwise."""
    value = float(value)
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} {value}: need a probability in [0, 1)")
    return value


def check_threshold(value: float) -> float:
    """``value`` as a float when it is a decision threshold in (0, 1); a ``ValueError`` otherwise."""
    value = float(value)
    if not 0.0 < value < 1.0:
        raise ValueError(f"threshold {value}: need a probability in (0, 1)")
    return value


def check_settings(
    threshold: float | None = None,
    min_confidence: float | None = None,
    min_page_confidence: float | None = None,
    decision: str | None = None,
) -> None:
    """A ``ValueError`` for the first of the decision settings given (not ``None``) that is out of range:
    the one check behind the model file, the labeler, its run-spec options and the training parameters."""
    if threshold is not None:
        check_threshold(threshold)
    for name, gate in (("min_confidence", min_confidence), ("min_page_confidence", min_page_confidence)):
        if gate is not None:
            check_gate(name, gate)
    if decision is not None:
        check_decision(str(decision))


def expected_f1_main(probabilities: np.ndarray, chars: np.ndarray) -> np.ndarray:
    """The blocks whose selection maximises the page's expected character F1.

    With ``p_i`` the probability and ``c_i`` the characters of block ``i``, taking the set ``S`` has an
    expected F1 of about ``2 Σ_S p_i c_i / (Σ_S c_i + Σ_all p_i c_i)`` (expected true positives over the
    predicted and the expected true characters). The best ``S`` is a prefix of the blocks by decreasing
    probability; the longest best prefix is taken. Blocks without characters are never selected here.

    Args:
        probabilities: ``(n,)`` probability of each block being main.
        chars: ``(n,)`` visible characters of each block.

    Returns:
        ``(n,)`` bool, the selected blocks (at least one when any block has characters).
    """
    p = np.asarray(probabilities, dtype=np.float64)
    c = np.asarray(chars, dtype=np.float64)
    main = np.zeros(p.shape[0], dtype=bool)
    texted = np.flatnonzero(c > 0)
    if not texted.size:
        return main
    order = texted[np.argsort(-p[texted], kind="stable")]
    expected_true = float((p[texted] * c[texted]).sum())
    gain = np.cumsum(p[order] * c[order])
    size = np.cumsum(c[order])
    f1 = 2.0 * gain / (size + expected_true)
    # Of the prefixes with the best expected F1 (to rounding), the longest; all-zero probabilities: the top.
    best = int(np.flatnonzero(f1 >= f1.max() - 1e-12)[-1]) + 1 if expected_true > 0 else 1
    main[order[:best]] = True
    return main


def expected_f1(probabilities: np.ndarray, chars: np.ndarray, main: np.ndarray | list[bool]) -> float:
    """The expected character F1 of the labels ``main`` under the model's ``probabilities``.

    The same estimate :func:`expected_f1_main` maximises: ``2 Σ_main p_i c_i / (Σ_main c_i + Σ_all p_i c_i)``,
    the model's own guess of how well these labels score; 0.0 on a page without characters.
    """
    p = np.asarray(probabilities, dtype=np.float64)
    c = np.asarray(chars, dtype=np.float64)
    taken = np.asarray(main, dtype=bool)
    denominator = float(c[taken].sum() + (p * c).sum())
    return 2.0 * float((p[taken] * c[taken]).sum()) / denominator if denominator > 0 else 0.0


def finish_labels(
    probabilities: np.ndarray,
    chars: np.ndarray,
    threshold: float,
    relative: float = RELATIVE_THRESHOLD,
    decision: str = "threshold",
) -> list[bool]:
    """Labels from probabilities.

    With ``decision="threshold"``, blocks at or above ``threshold`` are main; when no block with text
    reaches it, the blocks within ``relative`` of the likeliest one are main instead (every page in
    training had a main part, and an empty answer scores nothing). With ``"expected_f1"`` the blocks of
    :func:`expected_f1_main` are. A block without text (image, embed) follows its neighbours: main when the
    nearest blocks with text on both sides are.
    """
    check_decision(decision)
    has_text = chars > 0
    if decision == "expected_f1" and has_text.any():
        main = expected_f1_main(probabilities, chars)
    else:
        main = probabilities >= threshold
        if has_text.any() and not main[has_text].any():
            main = probabilities >= relative * float(probabilities[has_text].max())
    if has_text.all() or not has_text.any():
        return main.tolist()
    texted = np.flatnonzero(has_text)
    for index in np.flatnonzero(~has_text):
        slot = np.searchsorted(texted, index)
        before = main[texted[slot - 1]] if slot > 0 else False
        after = main[texted[slot]] if slot < texted.size else False
        main[index] = bool(before and after)
    return main.tolist()


def gate_labels(
    p: np.ndarray, chars: np.ndarray, threshold: float, decision: str, min_confidence: float, min_page: float
) -> Labels:
    """Labels of one page from its block probabilities, behind the two confidence gates.

    The page is declined (``main=None``, a ``low confidence`` failure, for the fallback) when no block with
    text reaches ``min_confidence``, or when the expected F1 of its labels (:func:`expected_f1`) is below
    ``min_page``. ``confidence`` (each block's probability) and ``page_confidence`` are given either way.
    """
    confidence = [round(v, 4) for v in p.tolist()]
    main = finish_labels(p, chars, threshold, decision=decision)
    page_confidence = round(expected_f1(p, chars, main), 4)
    top = float(p[chars > 0].max()) if (chars > 0).any() else 0.0
    failure = None
    if top < min_confidence:
        failure = f"low confidence: no block above {min_confidence:g} (best {top:.2f})"
    elif page_confidence < min_page:
        failure = f"low confidence: expected F1 {page_confidence:.2f} below {min_page:g}"
    if failure is not None:
        return Labels(main=None, failure=failure, confidence=confidence, page_confidence=page_confidence)
    return Labels(main=main, confidence=confidence, page_confidence=page_confidence)
