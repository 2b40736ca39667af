"""Policy artifacts: a fitted estimator as JSON (never pickle), with its model card.

The file holds the estimator's parameters, its training rows (``policies.encoding.FEATURES``
columns, NaN as null) and a model card. Loading refits the estimator on those rows -- the fit is
deterministic and takes about a second -- and checks that it reproduces the predictions stored
beside a few probe rows, so a scikit-learn upgrade that changes the model fails loudly instead of
silently. JSON keeps the artifact portable across scikit-learn versions and readable by people; no
code is ever loaded from it.

    >>> import numpy as np, tempfile, pathlib
    >>> from policies.encoding import FEATURES
    >>> X = np.zeros((40, len(FEATURES))); X[:, 0] = np.linspace(0, 1, 40)
    >>> est = SpeedupEstimator(correction="constant").fit(X, np.exp(X[:, 0]) * 0.9)
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "policy.json"
    >>> save_policy(path, est, X, np.exp(X[:, 0]) * 0.9, ["code"] * 40, {"training_data": "doc"})
    >>> policy = load_policy(path)
    >>> round(float(policy.estimator.predict(X[:1])[0]), 3), policy.card["training_data"]
    (0.9, 'doc')

Domain: the card records the hardware, engine and model sizes the rows came from; the learned
correction is applied only to deployments inside it (:meth:`Policy.covers`) -- boosted trees
extrapolate as constants, and a correction learned on a CPU zoo says nothing about an H100.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import sklearn

from picker.errors import UserError
from policies.encoding import FEATURES
from policies.estimator import SpeedupEstimator

SCHEMA = "specpicker.policy/1"
PROBE_ROWS = 16
PROBE_RTOL = 1e-6


@dataclass(frozen=True)
class Policy:
    """A loaded artifact: the refitted estimator and its model card."""

    estimator: SpeedupEstimator
    card: dict[str, Any]
    path: str

    def covers(self, hardware: str, engine: str, params: float) -> tuple[bool, str]:
        """Whether a deployment lies inside the training domain, and why not when it does not."""
        dom = self.card.get("domain", {})
        if dom.get("hardware") and hardware not in dom["hardware"]:
            return False, f"hardware {hardware} is not among the policy's training hardware {dom['hardware']}"
        if dom.get("engines") and engine not in dom["engines"]:
            return False, f"engine {engine} is not among the policy's training engines {dom['engines']}"
        lo, hi = dom.get("params", (0.0, math.inf))
        if not lo / 2 <= params <= hi * 2:
            return False, f"a {params:.3g}-parameter target is outside the policy's {lo:.3g}-{hi:.3g}"
        return True, "inside the training domain"


def _nullable(X: np.ndarray) -> list[list[float | None]]:
    return [[None if math.isnan(v) else float(f"{v:.9g}") for v in row] for row in X]


def _array(rows: Sequence[Sequence[float | None]]) -> np.ndarray:
    return np.asarray([[np.nan if v is None else v for v in row] for row in rows], dtype=float)


def save_policy(path: str | os.PathLike[str], est: SpeedupEstimator, X: np.ndarray, y: np.ndarray,
                groups: Sequence[str] | None, card: dict[str, Any]) -> None:
    """Write the artifact: parameters, training rows (rounded to 9 digits), card, probe predictions."""
    X = np.asarray(_array(_nullable(np.asarray(X, dtype=float))))  # what the file will hold
    y = np.asarray([float(f"{v:.9g}") for v in y])
    fitted = type(est)(**est.get_params()).fit(X, y, groups=groups)  # the fit load_policy reproduces
    probe = X[:: max(1, len(X) // PROBE_ROWS)][:PROBE_ROWS]
    data = {
        "schema": SCHEMA, "sklearn": sklearn.__version__, "features": list(FEATURES),
        "estimator": {"class": type(est).__name__, "params": fitted.get_params()},
        "card": {**card, "cross_validated_error": fitted.cv_error_, "rows": len(y)},
        "training": {"X": _nullable(X), "y": y.tolist(), "groups": list(groups) if groups is not None else None},
        "probe": {"X": _nullable(probe), "predictions": fitted.predict(probe).tolist()},
    }
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")  # written whole, then renamed: never half a file
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, target)


def _read(name: str) -> dict[str, Any]:
    """An artifact's JSON, checked for its schema and feature layout (one :class:`UserError` each)."""
    try:
        data = json.loads(Path(name).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError("policy file not found", file=name) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"cannot read the policy: {exc.__class__.__name__}", file=name) from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise UserError(f"not a policy artifact (schema {SCHEMA} expected)", file=name, field="schema")
    if data.get("features") != list(FEATURES):
        raise UserError("written for another feature layout; refit it from its sweeps with this version",
                        file=name, field="features")
    return data


def _estimator(data: dict[str, Any]) -> tuple[SpeedupEstimator, np.ndarray, np.ndarray, list[str] | None]:
    """The artifact's estimator (unfitted) and its training rows."""
    params = dict(data["estimator"]["params"])
    params["interval"] = tuple(params["interval"])
    params["domain_columns"] = tuple(params.get("domain_columns", ()))
    train = data["training"]
    return SpeedupEstimator(**params), _array(train["X"]), np.asarray(train["y"]), train["groups"]


def load_policy(path: str | os.PathLike[str]) -> Policy:
    """Read, refit and check an artifact; every problem is one :class:`UserError` naming the file."""
    name = os.fspath(path)
    data = _read(name)
    est, X, y, groups = _estimator(data)
    est.fit(X, y, groups=groups)
    probe = data["probe"]
    got = est.predict(_array(probe["X"]))
    if not np.allclose(got, probe["predictions"], rtol=PROBE_RTOL):
        raise UserError(f"refitting does not reproduce the stored predictions (scikit-learn {sklearn.__version__} "
                        f"here, {data['sklearn']} when written); refit the policy (specpick policy refit)",
                        file=name, field="probe")
    return Policy(est, data["card"], name)


def refit_policy(path: str | os.PathLike[str], out: str | os.PathLike[str]) -> None:
    """Write ``path``'s estimator refitted on its own rows with this scikit-learn, card kept, to ``out``
    (what a library upgrade that moves the stored predictions asks for)."""
    data = _read(os.fspath(path))
    est, X, y, groups = _estimator(data)
    card = {k: v for k, v in data["card"].items() if k not in ("cross_validated_error", "rows")}
    save_policy(out, est, X, y, groups, card)
