"""The reference engine's greedy tokens equal transformers' ``generate`` on the zoo, token id by id.

Three built-in prompts of every task type, encoded once by ``picker.tasks.encoding.encode_prompt``; both
decode 32 greedy tokens with no EOS stop. transformers runs the same weights through its own cache
and attention path, so the expected result is bit-for-bit agreement; a divergence is tolerated
only as a near tie (``tests/agreement.py``) and is printed with both sides' top-2 log-probs.
The same comparison runs against vLLM and llama.cpp in the engine tier.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

torch.set_num_threads(1)  # one thread: two on a busy 2-core machine are many times slower

from picker.engine.backend import TorchBackend
from picker.tasks.agreement import first_divergence
from picker.tasks.builtin import BUILDERS
from picker.tasks.encoding import load_prompt_tokenizer
from picker.zoo.resolve import zoo_paths
from tests.agreement import (
    MAX_NEW,
    Divergence,
    encoded_prompts,
    reference_tokens,
    reference_top2,
    summarize,
    top2_of,
)

# Same weights, same float32 CPU kernels, a different cache and attention-mask path: any gap
# between the first two log-probs wider than this must come out the same on both sides.
HF_TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def zoo() -> Any:
    return zoo_paths(progress=False)


@pytest.fixture(scope="module")
def backend(zoo: Any) -> TorchBackend:
    return TorchBackend.from_pretrained(zoo.target)


def test_prompts_cover_every_task_type_and_are_enough(zoo: Any) -> None:
    prompts = encoded_prompts(load_prompt_tokenizer(zoo.target))
    assert len(prompts) >= 20
    assert {p.task for p, _ in prompts} == set(BUILDERS)
    assert all(ids and len(ids) + MAX_NEW <= 1024 for _, ids in prompts)  # the zoo's context


def test_reference_greedy_equals_transformers_generate(zoo: Any, backend: TorchBackend) -> None:
    model = backend.model
    rows: list[tuple[str, int | None, Divergence | None]] = []
    for prompt, ids in encoded_prompts(load_prompt_tokenizer(zoo.target)):
        ours = reference_tokens(backend, ids)
        with torch.inference_mode():
            hf = model.generate(torch.tensor([ids]), max_new_tokens=MAX_NEW, do_sample=False, eos_token_id=None,
                                pad_token_id=model.config.pad_token_id, return_dict_in_generate=True,
                                output_logits=True)
        theirs = hf.sequences[0, len(ids):].tolist()
        assert len(theirs) == MAX_NEW  # no EOS stop on either side: the lengths are forced
        pos = first_divergence(ours, theirs)
        div = None
        if pos is not None:
            logp = torch.log_softmax(hf.logits[pos][0].double(), dim=-1).numpy()
            div = Divergence(prompt.id, pos, ours[pos], theirs[pos], reference_top2(backend, ids, ours, pos),
                             top2_of(logp), HF_TOLERANCE)
        rows.append((prompt.id, pos, div))
    report = summarize("transformers generate", rows)
    print(report)
    assert all(d is None or d.tolerated for _, _, d in rows), report
    # Near ties are rare: most prompts must agree over the whole length, or the check says little.
    assert sum(1 for _, pos, _ in rows if pos is None) >= len(rows) - 2, report


# ---- the comparison itself, on hand-made cases (so it can fail) -----------------------------------

def test_first_divergence_counts_a_length_difference() -> None:
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert first_divergence([1, 2, 3], [1, 2]) == 2


@pytest.mark.parametrize("ref, other, ok", [
    (((5, -0.69), (7, -0.70)), ((7, -0.69), (5, -0.695)), True),    # a swapped near tie
    (((5, -0.10), (7, -2.50)), ((7, -0.10), (5, -2.50)), False),    # a clear winner swapped
    (((5, -0.69), (7, -0.70)), ((7, -0.69), (9, -0.695)), False),   # another pair of tokens
])
def test_only_near_ties_over_the_same_two_tokens_are_tolerated(ref: Any, other: Any, ok: bool) -> None:
    div = Divergence("p", 3, 5, 7, ref, other, tolerance=0.02)
    assert div.tolerated is ok
    assert ("NOT tolerated" in div.describe()) is not ok
    assert not Divergence("p", 3, 5, 7, ref, None, tolerance=0.02).tolerated  # no log-probs: no excuse
