"""Prompt sets: built-in tasks are deterministic and sized by a limit; prompt files fail clearly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from picker.cli.main import app
from picker.errors import UserError
from picker.inputs.workload import TASK_TYPES
from picker.tasks import Prompt, builtin_prompts, builtin_tasks, render_turn
from picker.tasks.builtin import CODE_MODULES
from picker.tasks.files import SPEC_BENCH_CATEGORIES, load_prompt_file, parse_category_map

runner = CliRunner()


def test_every_builtin_task_is_a_workload_task_type() -> None:
    assert set(builtin_tasks()) <= set(TASK_TYPES)
    assert set(builtin_tasks()) == set(TASK_TYPES) - {"translation"}


@pytest.mark.parametrize("task", builtin_tasks())
def test_builtin_sets_are_deterministic_and_limited(task: str) -> None:
    first = builtin_prompts([task], limit=12)
    assert first == builtin_prompts([task], limit=12)
    assert len(first) == 12 and len({p.id for p in first}) == 12
    assert all(p.task == task and p.turns[0].strip() for p in first)
    # A larger limit extends the same ordering: a resumed run with a raised limit keeps its prompts.
    assert builtin_prompts([task], limit=20)[:12] == first
    assert builtin_prompts([task], limit=12, seed=1) != first


def test_code_prompts_avoid_the_zoo_training_modules() -> None:
    from picker.zoo.corpus import STDLIB_MODULES

    assert not set(CODE_MODULES) & set(STDLIB_MODULES)
    code = builtin_prompts(["code"], limit=5)
    assert all(p.turns[0].startswith("def ") and '"""' in p.turns[0] for p in code)


def test_copy_tasks_carry_their_source_text() -> None:
    summ = builtin_prompts(["summarization"], limit=3)
    assert all(p.turns[0].startswith("Text: ") and "Summary of the text above:" in p.turns[0] for p in summ)
    rag = builtin_prompts(["rag"], limit=3)
    assert all("Passage 2:" in p.turns[0] and "Question:" in p.turns[0] for p in rag)


def test_multi_turn_rendering_appends_each_generation() -> None:
    p = Prompt("q", "chat", ("Name a colour.", "Why that one?"), raw=False)
    first = render_turn(p, 0, [])
    assert first == "User: Name a colour.\nAssistant:"
    second = render_turn(p, 1, [" Blue."])
    assert second.startswith(first + " Blue.\n") and second.endswith("User: Why that one?\nAssistant:")
    with pytest.raises(ValueError):
        render_turn(p, 1, [])


def _write(tmp_path: Path, lines: list[object], name: str = "q.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def test_spec_bench_question_file(tmp_path: Path) -> None:
    path = _write(tmp_path, [
        {"question_id": 81, "category": "writing", "turns": ["Write a poem.", "Shorter."]},
        {"question_id": 82, "category": "coding", "turns": ["Write fizzbuzz."], "reference": ["..."]},
        "",
        {"question_id": 83, "category": "rag", "turns": ["Context: x. Q?"]},
    ])
    prompts = load_prompt_file(path)
    assert [(p.id, p.task, p.category, len(p.turns), p.raw) for p in prompts] == [
        ("81", "creative", "writing", 2, False), ("82", "code", "coding", 1, False), ("83", "rag", "rag", 1, False)]


def test_category_map_overrides_and_plain_prompt_lines(tmp_path: Path) -> None:
    path = _write(tmp_path, [{"id": "a", "category": "writing", "prompt": "Once"},
                             {"category": "support", "prompt": "Help me"}])
    prompts = load_prompt_file(path, parse_category_map("writing=chat,support=chat"))
    assert [(p.id, p.task, p.raw) for p in prompts] == [("a", "chat", True), ("line-2", "chat", True)]
    assert SPEC_BENCH_CATEGORIES["writing"] == "creative"


@pytest.mark.parametrize(("line", "field", "words"), [
    ("{not json", "line 2: json", "malformed JSON"),
    ("[1, 2]", "line 2: json", "expected an object"),
    ({"category": "code"}, "line 2: prompt", "exactly one of"),
    ({"category": "code", "prompt": "x", "turns": ["y"]}, "line 2: prompt", "exactly one of"),
    ({"category": "code", "turns": []}, "line 2: turns", "non-empty list"),
    ({"category": "code", "turns": ["ok", 3]}, "line 2: turns[1]", "non-empty string"),
    ({"prompt": "x"}, "line 2: category", "missing"),
    ({"prompt": "x", "category": "poetry"}, "line 2: category", "--category-map poetry=chat"),
    ({"prompt": "x", "category": "code", "id": 1.5}, "line 2: id", "string or an integer"),
    ({"prompt": "x", "category": "code", "id": "a"}, "line 2: id", "duplicate id"),
])
def test_bad_prompt_lines_name_file_line_and_field(tmp_path: Path, line: object, field: str, words: str) -> None:
    path = _write(tmp_path, [{"id": "a", "category": "code", "prompt": "fine"}, line])
    with pytest.raises(UserError) as err:
        load_prompt_file(path)
    assert err.value.file == str(path) and err.value.field == field and words in err.value.message


def test_bad_category_maps() -> None:
    with pytest.raises(UserError, match="expected CATEGORY=TASK"):
        parse_category_map("writing")
    with pytest.raises(UserError, match="not a task type"):
        parse_category_map("writing=poetry")


def test_missing_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="file not found"):
        load_prompt_file(tmp_path / "nope.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(UserError, match="no prompts"):
        load_prompt_file(tmp_path / "empty.jsonl")


def test_cli_reports_a_bad_prompt_file_in_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path, [{"id": "a", "category": "code", "prompt": "fine"}, {"prompt": "x", "category": "poetry"}])
    result = runner.invoke(app, ["profile", "--backend", "sglang", "--url", "http://127.0.0.1:9",
                                 "--prompts", str(path), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: line 2: category: ")


@pytest.mark.parametrize(("args", "field"), [
    (["--temperatures", "0,3"], "--temperatures"),
    (["--num-draft-tokens", "5-2"], "--num-draft-tokens"),
    (["--tasks", "translation"], "--tasks"),
    (["--category-map", "a"], None),
])
def test_cli_rejects_bad_options(tmp_path: Path, args: list[str], field: str | None) -> None:
    result = runner.invoke(app, ["profile", "--backend", "sglang", "--url", "http://127.0.0.1:9",
                                 "--out", str(tmp_path / "run"), *args])
    assert result.exit_code == 2
    if field:
        assert f": {field}: " in result.stderr or result.stderr.startswith(f"error: {field}")
