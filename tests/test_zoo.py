"""The zoo: corpus, tokenizer, the ci build (built once, cached on disk), determinism, the ε pair.

The ``ci`` zoo lands in the cache dir (``$SPECPICKER_ZOO_DIR`` or ``~/.cache/specpicker/zoo``) and
is reused by every later session; the first build takes about three minutes on two cores.
Timings are reported by the build, never asserted here (shared machines swing too widely).
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from typer.testing import CliRunner  # noqa: E402

from picker.errors import UserError  # noqa: E402
from picker.zoo import build_zoo, make_eps_draft, zoo_path  # noqa: E402
from picker.zoo.build import ZooPaths, build_recipe  # noqa: E402
from picker.zoo.cli import app  # noqa: E402
from picker.zoo.corpus import DOMAINS, build_corpus  # noqa: E402
from picker.zoo.recipe import RECIPES, recipe_hash  # noqa: E402
from picker.zoo.tokenizer import BOS_ID, EOS_ID  # noqa: E402
from picker.zoo.train import ModelSpec, TrainSchedule  # noqa: E402

TINY = dataclasses.replace(
    RECIPES["ci"], size="tiny", chars_per_domain=6_000, heldout_chars=1_500, vocab_size=300,
    seq_len=64, max_positions=128,
    target=ModelSpec(hidden=32, layers=2, heads=2, kv_heads=1, intermediate=64),
    draft=ModelSpec(hidden=16, layers=1, heads=1, kv_heads=1, intermediate=32),
    target_train=TrainSchedule(steps=4, batch=2, lr=3e-3),
    draft_train=TrainSchedule(steps=3, batch=2, lr=3e-3),
    distill_prompts=4, distill_prompt_len=8, distill_new_tokens=8,
)


@pytest.fixture(scope="session")
def ci_zoo() -> ZooPaths:
    """The ci zoo, built once per machine and reused from the cache afterwards."""
    return build_zoo("ci", progress=False)


@pytest.fixture(scope="session")
def ci_report(ci_zoo: ZooPaths) -> dict[str, Any]:
    return json.loads(ci_zoo.report.read_text())


def _weights(folder: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


# --- corpus ---------------------------------------------------------------------------------

def test_corpus_is_seeded_and_splits_are_disjoint() -> None:
    a, b = build_corpus(30_000, 5_000, seed=1), build_corpus(30_000, 5_000, seed=1)
    assert a.digest() == b.digest()
    assert build_corpus(30_000, 5_000, seed=2).digest() != a.digest()
    for d in DOMAINS:
        assert a.train[d] and a.heldout[d]
        assert not set(a.train[d]) & set(a.heldout[d])


def test_generated_domains_are_correct() -> None:
    corpus = build_corpus(20_000, 2_000, seed=0)
    for doc in corpus.train["json"]:  # a JSON array, or JSON lines
        text = doc.strip()
        lines = text.splitlines()
        records = json.loads(text) if text.startswith("[") else [json.loads(x) for x in lines]
        assert records and all(isinstance(r, dict) for r in records)
    step = re.compile(r"Step: (-?\d+) ([-+*]) (\d+) = (-?\d+)")
    steps = [m for doc in corpus.train["math"] for m in step.finditer(doc)]
    assert steps
    for m in steps:  # every worked step is true arithmetic
        a, op, b, result = int(m[1]), m[2], int(m[3]), int(m[4])
        assert {"+": a + b, "-": a - b, "*": a * b}[op] == result


# --- the ci build ------------------------------------------------------------------------------

def test_ci_zoo_loads_with_auto_classes(ci_zoo: ZooPaths) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    for folder in (ci_zoo.target, ci_zoo.draft):
        model = AutoModelForCausalLM.from_pretrained(folder)
        tok = AutoTokenizer.from_pretrained(folder)
        assert model.config.model_type == "llama"
        assert (folder / "generation_config.json").is_file()
        ids = tok("def f(x):\n    return x", return_tensors="pt").input_ids
        assert ids[0, 0].item() == BOS_ID == tok.bos_token_id and tok.eos_token_id == EOS_ID
        logits = model(input_ids=ids).logits
        assert logits.shape == (1, ids.shape[1], model.config.vocab_size)


def test_draft_shares_the_target_tokenizer(ci_zoo: ZooPaths) -> None:
    from transformers import AutoConfig

    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (ci_zoo.target / name).read_bytes() == (ci_zoo.draft / name).read_bytes()
    t_cfg, d_cfg = AutoConfig.from_pretrained(ci_zoo.target), AutoConfig.from_pretrained(ci_zoo.draft)
    assert t_cfg.vocab_size == d_cfg.vocab_size
    assert (t_cfg.bos_token_id, t_cfg.eos_token_id) == (d_cfg.bos_token_id, d_cfg.eos_token_id)


@pytest.mark.parametrize("domain", DOMAINS)
def test_tokenizer_round_trips_each_domain(ci_zoo: ZooPaths, domain: str) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ci_zoo.tokenizer)
    for doc in build_corpus(10_000, 3_000, seed=7).heldout[domain]:
        ids = tok(doc).input_ids
        assert tok.decode(ids, skip_special_tokens=True) == doc


@pytest.mark.parametrize("domain", DOMAINS)
def test_target_beats_draft_on_heldout_text(ci_report: dict[str, Any], domain: str) -> None:
    losses = ci_report["heldout_loss"]
    assert losses["target"][domain] < losses["draft"][domain]


def test_report_records_sizes_and_costs(ci_report: dict[str, Any]) -> None:
    params = ci_report["params"]
    assert params["target"] > 5 * params["draft"]
    costs = ci_report["costs"]
    assert costs["six_vs_one"] > 0 and costs["draft_vs_target"] > 0  # values: see the report
    for agree in ci_report["agreement"].values():
        assert 0 < agree["greedy_agreement"] <= 1 and 0 < agree["alpha_t1"] <= 1


def test_second_build_is_a_no_op(ci_zoo: ZooPaths) -> None:
    before = ci_zoo.report.stat().st_mtime_ns
    assert build_zoo("ci", progress=False) == ci_zoo == zoo_path("ci")
    assert ci_zoo.report.stat().st_mtime_ns == before


def test_cli_build_prints_the_report(ci_zoo: ZooPaths) -> None:
    result = CliRunner().invoke(app, ["build", "--size", "ci", "--out", str(ci_zoo.root), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "target loss" in result.output and str(ci_zoo.root) in result.output


# --- determinism and caching on a tiny recipe ------------------------------------------------------

def test_same_recipe_builds_identical_weights(tmp_path: Path) -> None:
    a = build_recipe(TINY, out=tmp_path / "a", progress=False)
    b = build_recipe(TINY, out=tmp_path / "b", progress=False)
    for sub in ("target", "draft"):
        wa, wb = _weights(getattr(a, sub)), _weights(getattr(b, sub))
        assert wa.keys() == wb.keys()
        assert all(torch.equal(wa[k], wb[k]) for k in wa)
    ra, rb = json.loads(a.report.read_text()), json.loads(b.report.read_text())
    assert ra["recipe_hash"] == rb["recipe_hash"] and ra["heldout_loss"] == rb["heldout_loss"]


def test_recipe_hash_follows_every_field() -> None:
    digest = "0" * 64
    base = recipe_hash(TINY, digest)
    assert recipe_hash(dataclasses.replace(TINY, seed=1), digest) != base
    assert recipe_hash(dataclasses.replace(TINY, kd_weight=0.25), digest) != base
    assert recipe_hash(TINY, "1" * 64) != base


def test_refuses_a_foreign_non_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="not empty"):
        build_recipe(TINY, out=tmp_path, progress=False)


# --- the ε pair ---------------------------------------------------------------------------

def test_eps_pair_tracks_its_target(ci_zoo: ZooPaths, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    ids = torch.tensor([[BOS_ID, *range(40, 80)]])
    agreement = {}
    for eps in (0.0, 0.5):
        pair = make_eps_draft(ci_zoo.target, tmp_path / str(eps), eps=eps, num_layers=1)
        target = AutoModelForCausalLM.from_pretrained(pair.target)
        draft = AutoModelForCausalLM.from_pretrained(pair.draft)
        assert draft.config.num_hidden_layers == 1
        with torch.no_grad():
            q, p = target(input_ids=ids).logits, draft(input_ids=ids).logits
        agreement[eps] = (q.argmax(-1) == p.argmax(-1)).float().mean().item()
        if eps == 0.0:  # the later layers add nothing: one function
            torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-4)
    assert agreement[0.5] < agreement[0.0] == 1.0
