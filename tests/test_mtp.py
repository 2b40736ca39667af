"""MTP modules on the zoo target: drafting computes what training trained (same masks, same chain),
the trained modules beat untrained ones, the profile entry, and the engine configs by version.
Exactness through the real loop is the conformance suite's (every registered strategy)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from picker.engine.backend import TorchBackend
from picker.engine.draft_layer import FrozenTarget
from picker.engine.drafting import DraftContext, SamplingParams
from picker.engine.plugins import load_strategies
from picker.inputs.drafters import DraftersSpec
from picker.recommend.engine_configs import ScheduleEntry, build_engine_configs
from strategies.mtp.drafter import make_drafter
from strategies.mtp.model import MtpHeads
from strategies.mtp.train import mtp_forward


@pytest.fixture(scope="module")
def zoo() -> Any:
    from picker.zoo.resolve import zoo_artifacts, zoo_paths

    paths = zoo_paths(progress=False)
    return paths, zoo_artifacts(paths)["mtp"]


@torch.inference_mode()
def test_the_drafted_chain_is_what_training_computes(zoo: Any) -> None:
    """The drafter's depth-k guess at the root equals the training forward's at that position when the
    chain before it is the drafted one: the caches, masks and module reuse agree with training."""
    paths, folder = zoo
    target = TorchBackend.from_pretrained(paths.target)
    drafter = make_drafter(target_backend=target, artifact=folder, num_draft_tokens=4)
    assert drafter.heads.config.num_modules == 2  # depths 3 and 4 reuse module 2
    ids = [int(t) for t in torch.randint(5, 200, (24,), generator=torch.Generator().manual_seed(0))]
    out = target.forward(ids, hidden=True, layers=())
    pending = int(out.logits[0, -1].argmax())
    seq = [*ids, pending]
    hidden = {"last": out.hidden["last"][0]}  # type: ignore[index]
    draft = drafter.propose(DraftContext(seq, len(ids), SamplingParams(), np.random.default_rng(0), 8, hidden))
    full = [*seq, *draft.tree.tokens]
    last = torch.zeros(1, len(full), hidden["last"].shape[-1])
    last[0, : len(ids)] = hidden["last"]  # positions past the root never reach it (masked)
    logits = mtp_forward(drafter.heads, drafter.target, torch.tensor([full]), last, 4)
    root = len(ids) - 1
    assert [int(lg[0, root].argmax()) for lg in logits] == list(draft.tree.tokens)


def test_trained_modules_beat_untrained_ones(zoo: Any) -> None:
    _, folder = zoo
    report = json.loads((Path(folder) / "recipe.json").read_text())["report"]
    assert report["num_modules"] == 2 and len(report["depth_accuracy"]) == 4
    assert all(t > u + 0.2 for t, u in zip(report["depth_accuracy"], report["untrained_depth_accuracy"]))


def test_heads_round_trip_through_safetensors(zoo: Any, tmp_path: Path) -> None:
    _, folder = zoo
    heads = MtpHeads.load(folder)
    heads.save(tmp_path / "copy")
    again = MtpHeads.load(tmp_path / "copy")
    assert all(torch.equal(a, b) for a, b in zip(heads.state_dict().values(), again.state_dict().values()))
    assert not list(tmp_path.rglob("*.bin")) and not list(tmp_path.rglob("*.pt"))


def test_frozen_target_is_shared_not_copied(zoo: Any) -> None:
    paths, folder = zoo
    target = TorchBackend.from_pretrained(paths.target)
    drafter = make_drafter(target_backend=target, artifact=folder)
    assert drafter.target.embed is target.model.get_input_embeddings()
    assert isinstance(drafter.target, FrozenTarget)


def test_the_profile_entry_is_a_count_or_built_in() -> None:
    assert DraftersSpec.model_validate({"mtp": {"modules": 1, "builtin": True}}).mtp.builtin  # type: ignore[union-attr]
    assert DraftersSpec.model_validate({"mtp": {"modules": 2, "path": "/m/mtp"}}).mtp.modules == 2  # type: ignore[union-attr]
    for bad in ({"modules": 1}, {"modules": 0, "builtin": True}, {"modules": 1, "builtin": True, "path": "x"}):
        with pytest.raises(ValueError):
            DraftersSpec.model_validate({"mtp": bad})


def _cfgs(n: int, version: str, info: dict[str, Any]) -> dict[str, Any]:
    return build_engine_configs(strategy="mtp", plugin=load_strategies()["mtp"], num_speculative_tokens=n, tree=None,
                                schedule=[ScheduleEntry(1, None, n)], draft_path="deepseek-ai/DeepSeek-V3",
                                versions={"vllm": version}, artifact_info=info)


def test_engine_configs_follow_the_version_and_the_checkpoint() -> None:
    builtin = {"modules": 1, "builtin": True}
    new = _cfgs(3, "0.32.0", builtin)
    assert new["vllm"]["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 3}
    assert new["vllm"]["valid_for"] == ">=0.11.0,<0.33.0"
    old = _cfgs(1, "0.10.1", builtin)["vllm"]
    assert old["speculative_config"]["method"] == "deepseek_mtp" and old["valid_for"] == ">=0.10.1,<0.11.0"
    two = _cfgs(3, "0.32.0", {"modules": 2, "builtin": True})["vllm"]
    assert two["supported"] is False and "multiples of 2" in two["reason"]
    sglang = new["sglang"]["args"]
    assert sglang[:4] == ["--speculative-algorithm", "NEXTN", "--speculative-draft-model-path",
                          "deepseek-ai/DeepSeek-V3"]
    assert new["tensorrt_llm"]["speculative_config"]["decoding_type"] == "MTP"
    assert new["llama_cpp"]["args"] == ["--spec-type", "draft-mtp", "--spec-draft-n-max", "3"]
