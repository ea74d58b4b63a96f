"""Formulas in main HTML → LaTeX, for :mod:`dripper.markdown`.

Recognised renderings, each returned as ``(latex, display)``:

- MathML ``<math>``: the ``<annotation encoding="application/x-tex">`` when present, else a conversion of
  the presentation markup (tokens, rows, scripts, fractions, roots, over/under, fences, tables);
- MathJax v2 ``<script type="math/tex">`` / ``math/tex; mode=display`` (and ``math/mml``);
- KaTeX ``.katex`` / ``.katex-display`` (their annotation; the ``.katex-html`` rendering is a duplicate);
- MediaWiki ``.mwe-math-element`` (MathML annotation, else the fallback image's alt);
- ``<img>`` whose class or src says it renders LaTeX (WordPress ``latex``, codecogs, …): the alt text.

Everything here works on lxml elements and never raises on odd markup; MathML conversion is recursive but
capped at :data:`MAX_MATHML_DEPTH` levels (deeper parts are kept as their text).
"""

from __future__ import annotations

import re

from lxml import etree

MAX_MATHML_DEPTH = 48

_TEX_ENCODINGS = frozenset(
    {"application/x-tex", "application/x-latex", "text/x-tex", "text/latex", "text/tex", "tex", "latex"}
)
# tag filters let lxml skip other nodes in C (a Python-level scan of a 10,000-deep tree is quadratic)
_MATH_TAGS = ("math", "{*}math", "m:math", "mml:math")
_ANNOTATION_TAGS = ("annotation", "{*}annotation", "m:annotation", "mml:annotation")
_WS_RE = re.compile(r"\s+")
_CMD_END_RE = re.compile(r"\\[A-Za-z]+$")
_SCRIPT_END_RE = re.compile(r"[_^][A-Za-z0-9]$")
_IMG_MATH_CLASS_RE = re.compile(r"(?:^|[\s_-])(?:latex|tex|math|equation|formula)(?:$|[\s_-])", re.I)
_IMG_MATH_SRC_RE = re.compile(r"latex|codecogs|mathtex|/tex\?|mimetex|math\.php|render_math", re.I)

_GREEK = (
    "alpha", "beta", "gamma", "delta", "varepsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda",
    "mu", "nu", "xi", "omicron", "pi", "rho", "varsigma", "sigma", "tau", "upsilon", "varphi", "chi", "psi",
    "omega"
)  # fmt: skip
SYMBOLS: dict[str, str] = {chr(0x3B1 + i): "\\" + name for i, name in enumerate(_GREEK)}
SYMBOLS["ο"] = "o"
SYMBOLS.update(
    {
        "Γ": "\\Gamma", "Δ": "\\Delta", "Θ": "\\Theta", "Λ": "\\Lambda", "Ξ": "\\Xi", "Π": "\\Pi",
        "Σ": "\\Sigma", "Υ": "\\Upsilon", "Φ": "\\Phi", "Ψ": "\\Psi", "Ω": "\\Omega", "ϵ": "\\epsilon",
        "ϑ": "\\vartheta", "ϕ": "\\phi", "ϖ": "\\varpi", "ϱ": "\\varrho", "±": "\\pm", "∓": "\\mp",
        "×": "\\times", "÷": "\\div", "⋅": "\\cdot", "·": "\\cdot", "∗": "\\ast", "∘": "\\circ",
        "≤": "\\leq", "≥": "\\geq", "≠": "\\neq", "≈": "\\approx", "≡": "\\equiv", "∼": "\\sim",
        "≃": "\\simeq", "≅": "\\cong", "∝": "\\propto", "≪": "\\ll", "≫": "\\gg", "∞": "\\infty",
        "∂": "\\partial", "∇": "\\nabla", "∑": "\\sum", "∏": "\\prod", "∐": "\\coprod", "∫": "\\int",
        "∬": "\\iint", "∭": "\\iiint", "∮": "\\oint", "√": "\\surd", "∈": "\\in", "∉": "\\notin",
        "∋": "\\ni", "⊂": "\\subset", "⊃": "\\supset", "⊆": "\\subseteq", "⊇": "\\supseteq",
        "∪": "\\cup", "∩": "\\cap", "⋃": "\\bigcup", "⋂": "\\bigcap", "∅": "\\emptyset",
        "∀": "\\forall", "∃": "\\exists", "∄": "\\nexists", "¬": "\\neg", "∧": "\\wedge", "∨": "\\vee",
        "→": "\\to", "←": "\\leftarrow", "↔": "\\leftrightarrow", "⇒": "\\Rightarrow",
        "⇐": "\\Leftarrow", "⇔": "\\Leftrightarrow", "↦": "\\mapsto", "…": "\\ldots", "⋯": "\\cdots",
        "⋮": "\\vdots", "⋱": "\\ddots", "′": "'", "″": "''", "°": "^\\circ", "ℝ": "\\mathbb{R}",
        "ℕ": "\\mathbb{N}", "ℤ": "\\mathbb{Z}", "ℚ": "\\mathbb{Q}", "ℂ": "\\mathbb{C}", "⊗": "\\otimes",
        "⊕": "\\oplus", "⨁": "\\bigoplus", "⨂": "\\bigotimes", "⟨": "\\langle", "⟩": "\\rangle",
        "〈": "\\langle", "〉": "\\rangle", "‖": "\\|", "∣": "\\mid", "ℏ": "\\hbar", "ℓ": "\\ell",
        "−": "-", "∖": "\\setminus", "⊥": "\\perp", "∠": "\\angle", "△": "\\triangle", "⌊": "\\lfloor",
        "⌋": "\\rfloor", "⌈": "\\lceil", "⌉": "\\rceil", "{": "\\{", "}": "\\}", "%": "\\%", "#": "\\#",
        "&": "\\&", "$": "\\$", "_": "\\_", "\\": "\\backslash", "\u2061": "", "\u2062": "", "\u2063": "",
        "\u2064": "", "\u200b": "",
    }
)  # fmt: skip
FUNCTIONS = frozenset((
    "sin", "cos", "tan", "cot", "sec", "csc", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "coth",
    "log", "ln", "lg", "exp", "lim", "liminf", "limsup", "max", "min", "sup", "inf", "det", "dim", "ker",
    "deg", "gcd", "arg", "hom", "Pr"
))  # fmt: skip
_BIG_OPERATORS = frozenset((
    "\\sum", "\\prod", "\\coprod", "\\int", "\\iint", "\\iiint", "\\oint", "\\bigcup", "\\bigcap",
    "\\bigoplus", "\\bigotimes", "\\lim", "\\liminf", "\\limsup", "\\max", "\\min", "\\sup", "\\inf",
    "\\det", "\\gcd", "\\Pr"
))  # fmt: skip
_OVER_ACCENTS = {
    "^": "\\hat", "ˆ": "\\hat", "¯": "\\overline", "‾": "\\overline", "_": "\\overline", "→": "\\vec",
    "⃗": "\\vec", "~": "\\tilde", "˜": "\\tilde", "˙": "\\dot", "¨": "\\ddot", "ˇ": "\\check",
    "˘": "\\breve", "⏞": "\\overbrace", "︷": "\\overbrace",
}  # fmt: skip
_UNDER_ACCENTS = {"_": "\\underline", "¯": "\\underline", "‾": "\\underline", "⏟": "\\underbrace"}
_VARIANTS = {
    "bold": "\\mathbf", "double-struck": "\\mathbb", "script": "\\mathcal", "fraktur": "\\mathfrak",
    "bold-italic": "\\boldsymbol", "sans-serif": "\\mathsf", "monospace": "\\mathtt",
}  # fmt: skip
_TEXT_ESCAPES = str.maketrans({"{": "\\{", "}": "\\}", "%": "\\%", "#": "\\#", "&": "\\&", "$": "\\$"})


def local_name(tag: object) -> str:
    """Lower-case tag name without namespace or prefix (``{ns}mi``, ``m:mi`` → ``mi``); '' for comments."""
    if not isinstance(tag, str):
        return ""
    if tag[:1] == "{":
        tag = tag.rpartition("}")[2]
    elif ":" in tag:
        tag = tag.rpartition(":")[2]
    return tag.lower()


def clean_tex(tex: str) -> str:
    """Trim a TeX string: outer ``$``/``\\(``/``\\[`` delimiters and a ``{\\displaystyle …}`` wrapper."""
    tex = tex.strip()
    for left, right in (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$")):
        if len(tex) > len(left) + len(right) and tex.startswith(left) and tex.endswith(right):
            tex = tex[len(left) : -len(right)].strip()
            break
    for style in ("\\displaystyle", "\\textstyle"):
        if tex.startswith("{" + style) and tex.endswith("}") and _balanced(tex[1:-1]):
            tex = tex[1 + len(style) : -1].strip()
        elif tex.startswith(style) and not tex[len(style) : len(style) + 1].isalpha():
            tex = tex[len(style) :].strip()
    return tex


def _balanced(tex: str) -> bool:
    depth = 0
    escaped = False
    for ch in tex:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


def tex_annotation(el: etree._Element) -> str | None:
    """The TeX source kept in a MathML ``<annotation>`` under ``el``, if any."""
    for node in el.iter(*_ANNOTATION_TAGS):
        encoding = (node.get("encoding") or "").strip().lower()
        if encoding in _TEX_ENCODINGS and node.text and node.text.strip():
            return clean_tex(node.text)
    return None


def math_element_tex(math: etree._Element) -> tuple[str, bool]:
    """A MathML ``<math>`` element → ``(latex, display)``; latex is '' when nothing could be read."""
    display = (math.get("display") or math.get("mode") or "").lower() in ("block", "display")
    tex = tex_annotation(math)
    if tex is None:
        tex = _WS_RE.sub(" ", _convert(math, 0)).strip()
    return tex, display


def script_tex(script: etree._Element) -> tuple[str, bool] | None:
    """A MathJax ``<script type="math/…">`` → ``(latex, display)``; None for other scripts."""
    kind = (script.get("type") or "").lower()
    if not kind.startswith("math/"):
        return None
    display = "mode=display" in kind.replace(" ", "")
    body = script.text or ""
    if kind.startswith("math/mml"):
        try:
            fragment = etree.fromstring(body, etree.HTMLParser())
        except (etree.LxmlError, ValueError):
            return None
        math = None if fragment is None else next(fragment.iter(*_MATH_TAGS), None)
        if math is None:
            return None
        tex, block = math_element_tex(math)
        return tex, display or block
    if not kind.startswith("math/tex"):
        return None  # AsciiMath and the like are not LaTeX
    return clean_tex(body), display


def container_tex(el: etree._Element, classes: str) -> tuple[str, bool] | None:
    """KaTeX / MediaWiki / MathJax 3 containers → ``(latex, display)``; None to walk ``el`` as usual."""
    display = "display" in classes or "-block" in classes or el.get("display") in ("true", "block")
    math = next(el.iter(*_MATH_TAGS), None)
    if math is not None:
        tex, block = math_element_tex(math)
        display = display or block
    else:
        tex = tex_annotation(el)
    if not tex and "mwe-math" in classes:
        alt = next((img.get("alt") for img in el.iter("img") if img.get("alt")), None)
        tex = clean_tex(alt) if alt else None
    return (tex, display) if tex else None


def image_tex(img: etree._Element) -> tuple[str, bool] | None:
    """An ``<img>`` that renders LaTeX (by class or src) → ``(alt latex, display)``; None otherwise."""
    alt = img.get("alt")
    if not alt or not alt.strip():
        return None
    classes = img.get("class") or ""
    if not (_IMG_MATH_CLASS_RE.search(classes) or _IMG_MATH_SRC_RE.search(img.get("src") or "")):
        return None
    display = "display" in classes or "block" in classes
    return clean_tex(alt), display


def is_mathjax_duplicate(el: etree._Element, classes: str) -> bool:
    """MathJax v2 preview / rendered output whose ``<script type="math/tex">`` source follows."""
    if "MathJax_Preview" in classes:
        return True
    if "MathJax" not in classes and "mjx-chtml" not in classes:
        return False
    nxt = el.getnext()
    while nxt is not None and not isinstance(nxt.tag, str):
        nxt = nxt.getnext()
    return nxt is not None and nxt.tag == "script" and (nxt.get("type") or "").startswith("math/")


# ---- presentation MathML → LaTeX -----------------------------------------------------------------------


def _children(el: etree._Element) -> list[etree._Element]:
    return [c for c in el if isinstance(c.tag, str)]


def _text(el: etree._Element) -> str:
    return "".join(el.itertext()).strip()


def _join(pieces: list[str]) -> str:
    out: list[str] = []
    for piece in pieces:
        if not piece:
            continue
        if out and piece[0].isalnum() and (_CMD_END_RE.search(out[-1]) or _SCRIPT_END_RE.search(out[-1])):
            out.append(" ")  # \alpha x, not \alphax; x^n y, not x^ny
        out.append(piece)
    return "".join(out)


def _group(tex: str) -> str:
    """Brace ``tex`` unless it is one character or one command."""
    if len(tex) == 1 or (tex.startswith("\\") and _CMD_END_RE.fullmatch(tex)):
        return tex
    return "{" + tex + "}"


def _arg(tex: str) -> str:
    return "{" + tex + "}"


def _row(el: etree._Element, depth: int) -> str:
    return _join([_convert(c, depth + 1) for c in _children(el)])


def _token(text: str) -> str:
    if len(text) == 1:
        return SYMBOLS.get(text, text)
    if text in FUNCTIONS:
        return "\\" + text
    return "".join(SYMBOLS.get(ch, ch) for ch in text)


def _mi(el: etree._Element, depth: int) -> str:
    text = _text(el)
    if not text:
        return ""
    if len(text) > 1 and text not in FUNCTIONS and text.isalpha():
        tex = "\\mathrm{" + text + "}"
    else:
        tex = _token(text)
    variant = _VARIANTS.get((el.get("mathvariant") or "").lower())
    return variant + _arg(tex) if variant else tex


def _mo(el: etree._Element, depth: int) -> str:
    return _token(_text(el))


def _mtext(el: etree._Element, depth: int) -> str:
    text = _WS_RE.sub(" ", "".join(el.itertext()))
    return "\\text{" + text.translate(_TEXT_ESCAPES) + "}" if text.strip() else ""


def _scripts(el: etree._Element, depth: int, marks: str) -> str:
    kids = [_convert(c, depth + 1) for c in _children(el)]
    if not kids:
        return ""
    out = _group(kids[0]) if kids[0] else "{}"
    for mark, script in zip(marks, kids[1:], strict=False):
        if script:
            out += mark + _group(script)
    return out


def _mfrac(el: etree._Element, depth: int) -> str:
    kids = [_convert(c, depth + 1) for c in _children(el)] + ["", ""]
    thickness = (el.get("linethickness") or "").strip().lower()
    command = "\\binom" if thickness in ("0", "0px", "0em", "0pt") else "\\frac"
    return command + _arg(kids[0]) + _arg(kids[1])


def _msqrt(el: etree._Element, depth: int) -> str:
    return "\\sqrt" + _arg(_row(el, depth))


def _mroot(el: etree._Element, depth: int) -> str:
    kids = [_convert(c, depth + 1) for c in _children(el)] + ["", ""]
    return "\\sqrt[" + kids[1] + "]" + _arg(kids[0])


def _limits(el: etree._Element, depth: int) -> str:
    """mover / munder / munderover: accents, limits of big operators, else \\overset / \\underset."""
    name = local_name(el.tag)
    kids = _children(el)
    if not kids:
        return ""
    base = _convert(kids[0], depth + 1)
    under = over = None
    if name == "munder" and len(kids) > 1:
        under = kids[1]
    elif name == "mover" and len(kids) > 1:
        over = kids[1]
    elif name == "munderover":
        under = kids[1] if len(kids) > 1 else None
        over = kids[2] if len(kids) > 2 else None
    if base in _BIG_OPERATORS:
        out = base
        if under is not None:
            out += "_" + _group(_convert(under, depth + 1))
        if over is not None:
            out += "^" + _group(_convert(over, depth + 1))
        return out
    out = base
    if under is not None:
        accent = _UNDER_ACCENTS.get(_text(under))
        low = _convert(under, depth + 1)
        out = accent + _arg(out) if accent else "\\underset" + _arg(low) + _arg(out)
    if over is not None:
        accent = _OVER_ACCENTS.get(_text(over))
        if accent == "\\overline" and len(base) == 1:
            accent = "\\bar"
        high = _convert(over, depth + 1)
        out = accent + _arg(out) if accent else "\\overset" + _arg(high) + _arg(out)
    return out


def _mfenced(el: etree._Element, depth: int) -> str:
    opening = el.get("open", "(")
    closing = el.get("close", ")")
    separators = (el.get("separators", ",") or "").split() or [""]
    separators = list("".join(separators)) or [""]
    parts: list[str] = []
    for i, child in enumerate(_children(el)):
        if i:
            parts.append(separators[min(i - 1, len(separators) - 1)])
        parts.append(_convert(child, depth + 1))
    return _token(opening) + _join(parts) + _token(closing)


def _mtable(el: etree._Element, depth: int) -> str:
    rows: list[str] = []
    for row in _children(el):
        name = local_name(row.tag)
        cells = _children(row) if name in ("mtr", "mlabeledtr") else [row]
        if name == "mlabeledtr":
            cells = cells[1:]  # the first cell is the equation label
        rows.append(
            " & ".join(
                _row(c, depth + 1) if local_name(c.tag) == "mtd" else _convert(c, depth + 1) for c in cells
            )
        )
    return "\\begin{matrix}" + " \\\\ ".join(rows) + "\\end{matrix}"


def _mmultiscripts(el: etree._Element, depth: int) -> str:
    kids = _children(el)
    if not kids:
        return ""
    post: list[str] = []
    pre: list[str] = []
    target = post
    for child in kids[1:]:
        name = local_name(child.tag)
        if name == "mprescripts":
            target = pre
            continue
        target.append("" if name == "none" else _convert(child, depth + 1))

    def attach(scripts: list[str]) -> str:
        out = ""
        for sub, sup in zip(scripts[0::2], scripts[1::2], strict=False):
            out += ("_" + _group(sub) if sub else "") + ("^" + _group(sup) if sup else "")
        return out

    prefix = "{}" + attach(pre) if pre else ""
    return prefix + _group(_convert(kids[0], depth + 1)) + attach(post)


def _first_child(el: etree._Element, depth: int) -> str:
    kids = _children(el)
    return _convert(kids[0], depth + 1) if kids else ""


def _nothing(el: etree._Element, depth: int) -> str:
    return ""


_HANDLERS = {
    "mi": _mi,
    "mn": _mo,
    "mo": _mo,
    "mtext": _mtext,
    "ms": _mtext,
    "mspace": lambda el, depth: " ",
    "msup": lambda el, depth: _scripts(el, depth, "^"),
    "msub": lambda el, depth: _scripts(el, depth, "_"),
    "msubsup": lambda el, depth: _scripts(el, depth, "_^"),
    "mfrac": _mfrac,
    "msqrt": _msqrt,
    "mroot": _mroot,
    "mover": _limits,
    "munder": _limits,
    "munderover": _limits,
    "mfenced": _mfenced,
    "mtable": _mtable,
    "mmultiscripts": _mmultiscripts,
    "semantics": _first_child,
    "maction": _first_child,
    "annotation": _nothing,
    "annotation-xml": _nothing,
    "mphantom": _nothing,
    "none": _nothing,
    "mprescripts": _nothing,
    "malignmark": _nothing,
    "maligngroup": _nothing,
}


def _convert(el: etree._Element, depth: int) -> str:
    if depth > MAX_MATHML_DEPTH:
        return _text(el)
    handler = _HANDLERS.get(local_name(el.tag))
    return handler(el, depth) if handler else _row(el, depth)
