"""Run inside the SGLang venv (not collected by pytest): resolve each case with SGLang's own code.

    python sglang_resolve.py CASES.json RESULTS.json

CASES.json is a list of ``{"id", "args", "adaptive_config"?: {...}, "batches"?: [int]}``; ``args``
are CLI tokens after ``--model-path``/``--device``, which are already in them. For each case a fresh
``ServerArgs`` is parsed with SGLang's own parser, built with ``from_cli_args`` (which validates
nothing) and resolved with ``resolve_once()`` (where SGLang checks and fills speculative settings).
When ``adaptive_config`` is given it is written to a file that replaces the ``ADAPTIVE_CONFIG``
token, and SGLang's own ``AdaptiveSpeculativeParams`` reports the steps it would use at each of
``batches``. One process serves all cases because importing SGLang takes tens of seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

RESOLVED = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
            "speculative_num_draft_tokens", "speculative_adaptive", "speculative_draft_model_path",
            "speculative_ngram_min_bfs_breadth", "speculative_ngram_max_bfs_breadth")


def resolve(parser: argparse.ArgumentParser, case: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """Resolve one case; never raises (a rejection is a result)."""
    from sglang.srt.server_args import ServerArgs

    args = list(case["args"])
    cfg_path = None
    if case.get("adaptive_config") is not None:
        cfg_path = workdir / f"{case['id']}.adaptive.json"
        cfg_path.write_text(json.dumps(case["adaptive_config"]))
        args = [str(cfg_path) if a == "ADAPTIVE_CONFIG" else a for a in args]
    out: dict[str, Any] = {"id": case["id"]}
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # argparse prints usage before SystemExit
            ns = parser.parse_args(args)
        server_args = ServerArgs.from_cli_args(ns)
        server_args.resolve_once()
    except BaseException as err:  # SystemExit from argparse, AssertionError, ValueError, ...
        out.update(ok=False, error=f"{type(err).__name__}: {err}",
                   where=traceback.format_exc(limit=-1).strip().splitlines()[-2:])
        return out
    # Resolution writes to a stash, not to the record's attributes: read it back through SGLang's
    # own resolved_dict() (what /get_server_info reports).
    resolved = server_args.resolved_dict()
    out.update(ok=True, resolved={k: resolved.get(k) for k in RESOLVED})
    if cfg_path is not None:
        from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams

        params = AdaptiveSpeculativeParams(initial_steps=server_args.speculative_num_steps,
                                           cfg_path=str(cfg_path))
        out["steps_at_batch"] = {str(b): params.get_steps_for_batch(b) for b in case.get("batches", [])}
    return out


def main() -> None:
    cases_path, results_path = Path(sys.argv[1]), Path(sys.argv[2])
    logging.disable(logging.WARNING)  # SGLang warns about every auto-adjustment; results carry them
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    cases = json.loads(cases_path.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        results = [resolve(parser, case, Path(tmp)) for case in cases]
    import sglang

    results_path.write_text(json.dumps({"sglang_version": sglang.__version__, "results": results},
                                       default=str))


if __name__ == "__main__":
    main()
