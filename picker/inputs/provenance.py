"""What a measurements file measured (its provenance), checked against the deployment a profile describes.

``specpick profile`` writes ``run.provenance`` into ``summary.json`` (``picker.profiler.provenance``);
files written before it carry none and stay readable (provenance unknown). :func:`compare` is pure:

- same model, engine and hardware: "measured" -- α and step costs both stand for the deployment;
- same model on other hardware or another engine: "alpha-only" -- acceptance transfers (it depends
  on the model pair and the text, not on the accelerator), step costs do not;
- another model: "other-model" -- refused at the edge (:func:`check_measurements`) unless the user
  passes ``--allow-other-model``; then every number resting on the file is labelled "measured on <model>".

    >>> p = Provenance(model=ArtifactId(name="meta-llama/Llama-3.1-8B-Instruct"), backend="vllm",
    ...                engine="vllm", hardware=HardwareId(gpu="a100-80gb", gpu_count=1))
    >>> same_model_name("meta-llama/Llama-3.1-8B-Instruct", "/models/llama-3.1-8b-instruct")
    True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from picker.errors import UserError
from picker.inputs.hardware import resolve_hardware_name
from picker.inputs.workload import WorkloadProfile

SCHEMA = "specpicker.provenance/1"
OVERRIDE_FLAG = "--allow-other-model"
PARAMS_TOLERANCE = 0.10  # two "same name" models whose sizes differ by more than this are different
# `specpick profile --backend` names against workload engine names, where they differ; the torch
# backend is the reference loop, which is no serving engine.
BACKEND_ENGINE = {"llamacpp": "llama_cpp", "torch": "torch reference loop"}
Status = Literal["measured", "alpha-only", "other-model", "unknown"]


class _Open(BaseModel):
    # Later writers may add fields; a reader that refused them would break on every new release.
    model_config = ConfigDict(extra="allow", frozen=True)


class ArtifactId(_Open):
    """A model, draft or set of heads: its name, size and content hashes where the files were local."""

    name: str
    path: str | None = None
    params: int | None = None
    config_sha256: str | None = None
    tokenizer_sha256: str | None = None


class HardwareId(_Open):
    """Where the measurements ran: accelerator (catalog name where known), its count, the CPU."""

    gpu: str | None = None        # catalog key (picker.inputs.hardware) or the device's own name
    gpu_name: str | None = None   # as the driver reports it
    gpu_count: int | None = None
    cpu: str | None = None
    cores: int | None = None
    device: str | None = None     # "cpu", "cuda", or "server" for a live endpoint


class Provenance(_Open):
    """``run.provenance`` of a profiler summary (``specpicker.provenance/1``)."""

    schema_: str = SCHEMA
    model: ArtifactId
    drafts: dict[str, ArtifactId] = {}
    backend: str
    engine: str | None = None
    engine_version: str | None = None
    hardware: HardwareId = HardwareId()
    dtype: str | None = None
    prompts: str | None = None
    prompt_set_sha256: str | None = None
    chat_template: str | None = None
    date: str | None = None

    @property
    def where(self) -> str:
        """The engine and hardware in words, e.g. 'torch reference loop 2.13 on cpu (Xeon, 2 cores)'."""
        hw = self.hardware
        place = hw.gpu or (f"cpu ({hw.cpu}, {hw.cores} cores)" if hw.cpu else hw.device or "unrecorded hardware")
        if hw.gpu and (hw.gpu_count or 1) > 1:
            place += f" x{hw.gpu_count}"
        version = f" {self.engine_version}" if self.engine_version else ""
        return f"{self.engine or self.backend}{version} on {place}"


@dataclass(frozen=True)
class Match:
    """How a measurements file relates to the deployment; ``keep_costs`` False drops its step costs."""

    status: Status
    measured_model: str
    profile_model: str
    keep_costs: bool | None   # None: provenance unknown, the scorer's engine rule decides
    notes: tuple[str, ...]

    @property
    def label(self) -> str | None:
        """What every number resting on the file is labelled with when the model differs."""
        return f"measured on {self.measured_model}" if self.status == "other-model" else None


def read_provenance(measurements: Any) -> Provenance | None:
    """``run.provenance`` of a loaded summary, or None for files written before it was recorded."""
    run = getattr(measurements, "run", None) if measurements is not None else None
    raw = run.get("provenance") if isinstance(run, dict) else None
    if not isinstance(raw, dict):
        return None
    try:
        return Provenance.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(["run", "provenance", *(str(p) for p in err["loc"])])
        raise UserError(err["msg"], file=getattr(measurements, "source", None) or None, field=field) from None


def _base(name: str) -> str:
    base = name.rstrip("/").rsplit("/", 1)[-1].strip().lower()
    return base.removesuffix(".gguf")


def same_model_name(a: str, b: str) -> bool:
    """Hub id and local folder of one model agree by their last path component, case aside."""
    return bool(_base(a)) and _base(a) == _base(b)


def _same_model(prov: Provenance, profile: WorkloadProfile) -> bool:
    m = prov.model
    if not same_model_name(m.name, profile.model.name) and not (m.path and same_model_name(m.path, profile.model.name)):
        return False
    if m.params:  # one name, two sizes (a renamed folder): the sizes decide
        want = profile.model_shape().params
        return abs(m.params - want) <= PARAMS_TOLERANCE * want
    return True


def engine_of(backend: str) -> str:
    return BACKEND_ENGINE.get(backend, backend)


def compare(prov: Provenance | None, profile: WorkloadProfile) -> Match:
    """Pure: what the measurements may stand for in ``profile``'s deployment."""
    want = profile.model.name
    if prov is None:
        return Match("unknown", "an unrecorded model", want, None, (
            "the measurements record no provenance (written before it was recorded): nothing checks that "
            "they come from this deployment's model, engine and hardware; re-profile to check",))
    here = prov.model.name
    deploy = f"{profile.engine.name} {profile.engine.version} on {profile.hardware.gpu}" + (
        f" x{profile.hardware.count}" if profile.hardware.count > 1 else "")
    if not _same_model(prov, profile):
        size = f" ({prov.model.params:,} parameters)" if prov.model.params else ""
        return Match("other-model", here, want, False, (
            f"measured on {here}{size}, {prov.where}; the profile deploys {want}: acceptance was measured on "
            "another model and step costs on another deployment, so costs are dropped and every number "
            f"resting on the measurements is labelled 'measured on {here}'",))
    engine = prov.engine or engine_of(prov.backend)
    differs = []
    if engine != profile.engine.name:
        differs.append(f"engine {engine} (deployment: {profile.engine.name})")
    elif prov.engine_version and prov.engine_version != profile.engine.version:
        differs.append(f"{engine} version {prov.engine_version} (deployment: {profile.engine.version})")
    gpu = resolve_hardware_name(prov.hardware.gpu) if prov.hardware.gpu else None
    if prov.hardware.device == "server" and prov.hardware.gpu is None:
        pass  # a live endpoint does not report its accelerator: the engine check stands for it
    elif gpu != profile.hardware.gpu or (prov.hardware.gpu_count or 1) != profile.hardware.count:
        differs.append(f"hardware {prov.where.split(' on ', 1)[1]} (deployment: {profile.hardware.gpu} "
                       f"x{profile.hardware.count})")
    if differs:
        return Match("alpha-only", here, want, False, (
            f"measured on the same model but another deployment ({'; '.join(differs)}): acceptance (alpha) "
            f"transfers, step costs do not -- costs come from the roofline of {deploy}",))
    return Match("measured", here, want, True, (f"measurements match the deployment: {here} on {deploy}",))


def check_measurements(measurements: Any, profile: WorkloadProfile, allow_other_model: bool = False) -> Match:
    """The edge check of ``recommend --measurements``: refuse another model unless overridden."""
    match = compare(read_provenance(measurements), profile)
    if match.status == "other-model" and not allow_other_model:
        raise UserError(f"measured on {match.measured_model}, but the profile deploys {match.profile_model}; "
                        f"pass {OVERRIDE_FLAG} to use them anyway", file=getattr(measurements, "source", None) or None,
                        field="run.provenance.model")
    return match


def costs_transfer(profile: WorkloadProfile, measurements: Any, explicit: bool | None = None) -> bool:
    """Whether the scorer uses the measured step costs: ``explicit`` when the caller says (a policy
    trained on measured costs, a regret evaluation), else only when the provenance matches the deployment,
    and for files without provenance when they were measured on the profile's own engine."""
    if explicit is not None:
        return explicit
    if measurements is None:
        return False
    keep = compare(read_provenance(measurements), profile).keep_costs
    if keep is not None:
        return keep
    backend = str((getattr(measurements, "run", None) or {}).get("backend", ""))
    return engine_of(backend) == profile.engine.name
