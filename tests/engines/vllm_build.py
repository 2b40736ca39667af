"""Run inside the vLLM venv (not collected by pytest): build each speculative config with vLLM's code.

    python vllm_build.py TARGET_DIR CASES.json RESULTS.json

CASES.json is a list of ``{"id", "spec": {...}, "batches"?: [int], "target"?: DIR, "dtype"?: str}``.
Each spec goes through ``EngineArgs(model=TARGET_DIR, speculative_config=spec).create_engine_config()``,
the path ``--speculative-config`` takes in the server, which validates the ``SpeculativeConfig``
(method, fields, draft config) without loading weights; a case may name its own target folder (an
MTP config needs an MTP checkpoint's config.json) and dtype (FP8 checkpoints need bfloat16). Every
key of the spec is also checked against ``SpeculativeConfig``'s own fields (``unknown_fields``), so a
method that needs a package this venv lacks still has its keys checked. A batch schedule is also
put through vLLM's own ``validate_and_normalize_dynamic_sd_schedule`` and
``build_dynamic_sd_schedule_lookup`` (the scheduler's per-batch table), which report the K vLLM
would draft at each of ``batches``.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from pathlib import Path
from typing import Any

MAX_NUM_SEQS = 1024  # the table is built up to the server's max_num_seqs; probes stay below it


def build(target: str, case: dict[str, Any]) -> dict[str, Any]:
    """Build one case; never raises (a rejection is a result)."""
    import dataclasses

    from vllm.config import SpeculativeConfig
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.spec_decode.dynamic.utils import (
        build_dynamic_sd_schedule_lookup,
        validate_and_normalize_dynamic_sd_schedule,
    )

    known = {f.name for f in dataclasses.fields(SpeculativeConfig)}
    out: dict[str, Any] = {"id": case["id"], "unknown_fields": sorted(set(case["spec"]) - known)}
    try:
        args = EngineArgs(model=case.get("target", target), enforce_eager=True, dtype=case.get("dtype", "float32"),
                          max_model_len=1024, speculative_config=dict(case["spec"]))
        spec = args.create_engine_config().speculative_config
        schedule = case["spec"].get("num_speculative_tokens_per_batch_size")
        table = None
        if schedule is not None:
            validate_and_normalize_dynamic_sd_schedule(schedule)
            table = build_dynamic_sd_schedule_lookup(schedule, MAX_NUM_SEQS, spec.num_speculative_tokens)
    except BaseException as err:  # pydantic ValidationError, ValueError, ...
        out.update(ok=False, error=f"{type(err).__name__}: {err}"[:2000],
                   where=traceback.format_exc(limit=-1).strip().splitlines()[-2:])
        return out
    out.update(ok=True, method=spec.method, num_speculative_tokens=spec.num_speculative_tokens,
               model=spec.model, schedule=[list(e) for e in spec.num_speculative_tokens_per_batch_size or []])
    if table is not None:
        out["k_at_batch"] = {str(b): table[min(b, MAX_NUM_SEQS)] for b in case.get("batches", [])}
    return out


def main() -> None:
    target, cases_path, results_path = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    logging.disable(logging.WARNING)
    import importlib.util

    import vllm

    results = [build(target, case) for case in json.loads(cases_path.read_text())]
    results_path.write_text(json.dumps({"vllm_version": vllm.__version__, "results": results,
                                        "arctic_inference": importlib.util.find_spec("arctic_inference") is not None},
                                       default=str))


if __name__ == "__main__":
    main()
