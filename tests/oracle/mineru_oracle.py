"""Run the upstream ``mineru-html`` 1.1.2 simplifier as a test oracle, in its own venv.

Usage: ``.venv-oracle/bin/python tests/oracle/mineru_oracle.py IN.jsonl OUT.jsonl``.
IN holds records with ``id`` and ``html``; OUT gets ``id, simplified_html, mapping_html, prompt, error,
seconds`` (the CPU time ``simplify_html`` took, for the speed benchmark: CPU time, not wall time, so that
other work on a shared machine does not count against either side).

The package's ``__init__`` imports its inference backends (transformers, torch); the oracle only needs the
pure-Python processing modules, so the package is registered without running its ``__init__``.
"""

import importlib.util
import json
import sys
import time
import types
from pathlib import Path


def _load_processing_modules():
    spec = importlib.util.find_spec("mineru_html")
    if spec is None:  # pragma: no cover - the venv is built by `make oracle`
        raise SystemExit("mineru-html is not installed in this interpreter; run `make oracle`")
    root = Path(spec.origin).parent
    for name, folder in (("mineru_html", root), ("mineru_html.process", root / "process")):
        package = types.ModuleType(name)
        package.__path__ = [str(folder)]
        sys.modules[name] = package
    from mineru_html.process import build_prompt, simplify_html

    return simplify_html.simplify_html, build_prompt.get_full_prompt


def main() -> None:
    simplify, get_full_prompt = _load_processing_modules()
    source, target = Path(sys.argv[1]), Path(sys.argv[2])
    with source.open() as reader, target.open("w") as writer:
        for line in reader:
            record = json.loads(line)
            out = {"id": record["id"], "error": None}
            try:
                started = time.process_time()
                simplified, mapping = simplify(record["html"])
                out["seconds"] = time.process_time() - started
                out.update(
                    simplified_html=simplified,
                    mapping_html=mapping,
                    prompt=get_full_prompt(simplified, "short_compact"),
                )
            except Exception as error:  # the oracle's failures are data for the comparison
                out["error"] = f"{type(error).__name__}: {error}"
            writer.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
