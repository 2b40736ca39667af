"""The policy's speedup model as a scikit-learn estimator: the analytic base plus a learned correction.

``X`` holds candidate rows (``policies.encoding.FEATURES``); column ``base_column`` is the log of
the analytic cost model's speedup. Unfitted, the estimator predicts exactly that (the cost model
needs no training data, so the ``requires_fit`` tag is False). ``fit`` learns a correction on the
log-residual ``log(measured) − log(base)``: gradient boosting once there are enough rows, a
constant shift below that, nothing with ``correction="none"``. How much of the correction to apply
is itself chosen by cross-validation (``shrinkage="cv"``): the factor λ ∈ [0, 1] whose out-of-fold
error over the training rows is lowest, so a correction that does not beat the analytic model on
groups it has not seen is shrunk toward it, or switched off (λ = 0). The range comes from out-of-fold
residual quantiles (split-conformal style; folds follow ``groups`` -- e.g. task types -- so the
range reflects error on unseen groups) or from quantile gradient boosting.

    >>> import numpy as np
    >>> X = np.log([[1.5], [2.0], [1.2]])
    >>> SpeedupEstimator().predict(X).round(2)            # unfitted: the analytic base
    array([1.5, 2. , 1.2])
    >>> est = SpeedupEstimator(correction="constant", shrinkage=1.0).fit(X, [1.35, 1.8, 1.08])
    >>> est.predict(X).round(2), round(est.offset_, 3)
    (array([1.35, 1.8 , 1.08]), -0.105)

The estimator follows the contract exactly: ``__init__`` stores parameters, ``fit`` returns self,
learned attributes end in ``_``; ``tests/test_estimator.py`` runs ``parametrize_with_checks``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.model_selection import GroupKFold, KFold
from sklearn.utils.validation import check_is_fitted, validate_data
from threadpoolctl import threadpool_limits

Correction = Literal["gbm", "constant", "none"]
# Candidate shrinkage factors for shrinkage="cv": coarse on purpose -- with a dozen groups the
# out-of-fold error cannot tell finer steps apart.
SHRINKAGE_GRID = (0.0, 0.25, 0.5, 0.75, 1.0)
IntervalMethod = Literal["conformal", "quantile"]


class SpeedupEstimator(RegressorMixin, BaseEstimator):
    """Predicted speedup = analytic base × exp(learned log-correction), with a range.

    Parameters
    ----------
    base_column : column of ``X`` holding log(analytic speedup).
    correction : ``"gbm"`` (boosted trees on the log-residual), ``"constant"`` (median residual)
        or ``"none"`` (the analytic model only; ``fit`` still learns the range).
    boosting_rounds, learning_rate, max_depth, min_samples_leaf, l2_regularization : the boosting
        (``HistGradientBoostingRegressor``; it reads NaN as "unknown", which candidate rows use).
        Defaults are set a priori for hundreds of rows from a dozen workloads -- shallow trees, large
        leaves -- and were not tuned on the regret evaluation's held-out workloads (``docs/policy.md``).
    shrinkage : ``"cv"`` (choose λ from :data:`SHRINKAGE_GRID` by the out-of-fold median relative
        error, ties to the smaller λ) or a fixed factor in [0, 1]: predictions are
        base × exp(λ · correction).
    domain_columns : columns (e.g. temperature, batch size) outside whose fitted range the
        correction is not applied: a row beyond the training data gets the analytic base alone, since
        a correction learned at T = 0 says nothing about T = 1 (cross-validation over task groups
        cannot see that shift).
    min_rows : below this many rows a ``"gbm"`` correction falls back to the constant shift
        (a few rows cannot support trees).
    interval : (low, high) quantiles of the range, e.g. (0.05, 0.95) for a 90% range.
    interval_method : ``"conformal"`` (out-of-fold residual quantiles) or ``"quantile"``
        (quantile boosting on the residual).
    cv : folds for the out-of-fold residuals (conformal range and the cross-validated error).
    prior_rel_error : relative half-width of the range when unfitted (an assumption, stated).
    random_state : seed of the folds.
    """

    def __init__(
        self,
        base_column: int = 0,
        correction: Correction = "gbm",
        boosting_rounds: int = 100,
        learning_rate: float = 0.1,
        max_depth: int | None = 2,
        min_samples_leaf: int = 15,
        l2_regularization: float = 1.0,
        shrinkage: float | Literal["cv"] = "cv",
        domain_columns: tuple[int, ...] = (),
        min_rows: int = 30,
        interval: tuple[float, float] = (0.05, 0.95),
        interval_method: IntervalMethod = "conformal",
        cv: int = 5,
        prior_rel_error: float = 0.25,
        random_state: int | None = 0,
    ) -> None:
        self.base_column = base_column
        self.correction = correction
        self.boosting_rounds = boosting_rounds
        self.learning_rate = learning_rate
        self.max_depth = max_depth
        self.min_samples_leaf = min_samples_leaf
        self.l2_regularization = l2_regularization
        self.shrinkage = shrinkage
        self.domain_columns = domain_columns
        self.min_rows = min_rows
        self.interval = interval
        self.interval_method = interval_method
        self.cv = cv
        self.prior_rel_error = prior_rel_error
        self.random_state = random_state

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.requires_fit = False            # the analytic base predicts with no training data
        tags.input_tags.allow_nan = True     # unknown evidence is NaN; the boosting handles it
        tags.target_tags.positive_only = True  # speedups are positive: the residual is in log space
        # A constant shift (or no correction, or one shrunk by cross-validation, which may switch it
        # off) cannot fit arbitrary data, by design: say so.
        tags.regressor_tags.poor_score = not (self.correction == "gbm" and self.shrinkage == 1.0)
        return tags

    # ------------------------------------------------------------------------- fitting

    def _booster(self, loss: str = "squared_error", quantile: float | None = None) -> HistGradientBoostingRegressor:
        return HistGradientBoostingRegressor(
            loss=loss, quantile=quantile, max_iter=self.boosting_rounds, learning_rate=self.learning_rate,
            max_depth=self.max_depth, min_samples_leaf=self.min_samples_leaf,
            l2_regularization=self.l2_regularization, early_stopping=False, random_state=self.random_state)

    def _check_params(self) -> None:
        if self.correction not in ("gbm", "constant", "none"):
            raise ValueError(f"correction must be 'gbm', 'constant' or 'none', got {self.correction!r}")
        if self.interval_method not in ("conformal", "quantile"):
            raise ValueError(f"interval_method must be 'conformal' or 'quantile', got {self.interval_method!r}")
        lo, hi = self.interval
        if not 0.0 < lo < hi < 1.0:
            raise ValueError(f"interval must be two quantiles 0 < low < high < 1, got {self.interval!r}")
        if self.shrinkage != "cv" and not (isinstance(self.shrinkage, (int, float)) and 0.0 <= self.shrinkage <= 1.0):
            raise ValueError(f"shrinkage must be 'cv' or a number in [0, 1], got {self.shrinkage!r}")

    def _fit_correction(self, X: np.ndarray, r: np.ndarray) -> tuple[Any, float]:
        """(booster or None, constant offset) fitted to residuals ``r``."""
        if self.correction == "none":
            return None, 0.0
        if self.correction == "constant" or len(r) < self.min_rows:
            return None, float(np.median(r))
        return self._booster().fit(X, r), 0.0

    @staticmethod
    def _apply(model: Any, offset: float, X: np.ndarray) -> np.ndarray:
        if model is None:
            return np.full(len(X), offset)
        with threadpool_limits(limits=1, user_api="openmp"):  # see fit: threads only contend here
            return model.predict(X)

    def fit(self, X: Any, y: Any, groups: Sequence[Any] | None = None) -> SpeedupEstimator:
        """Learn the log-residual correction and the range. ``groups`` (one label per row) makes the
        folds leave whole groups out (e.g. task types), so the range is honest for unseen groups."""
        self._check_params()
        X, y = validate_data(self, X, y, ensure_all_finite="allow-nan", y_numeric=True)
        if np.any(y <= 0):
            raise ValueError("speedups (y) must be positive")
        if not 0 <= self.base_column < X.shape[1]:
            raise ValueError(f"base_column {self.base_column} outside the {X.shape[1]} feature(s) of X")
        if any(not 0 <= c < X.shape[1] for c in self.domain_columns):
            raise ValueError(f"domain_columns {self.domain_columns!r} outside the {X.shape[1]} feature(s) of X")
        cols = list(self.domain_columns)
        self.domain_ = (np.nanmin(X[:, cols], axis=0), np.nanmax(X[:, cols], axis=0)) if cols else None
        r = np.log(y) - self._base(X)
        # Training sets are hundreds of rows: OpenMP threads only add overhead (and on a shared
        # CPU, contention), so boosting runs on one thread.
        with threadpool_limits(limits=1, user_api="openmp"):
            self.correction_, self.offset_ = self._fit_correction(X, r)
            oof = self._out_of_fold(X, r, groups)
        self.shrinkage_ = self._choose_shrinkage(r, oof)
        err = r - self.shrinkage_ * oof  # log(measured) − log(predicted), each row predicted without its fold
        lo, hi = self.interval
        self.residual_quantiles_ = np.quantile(err, [lo, hi]) if len(err) else np.zeros(2)
        self.base_quantiles_ = np.quantile(r, [lo, hi]) if len(r) else np.zeros(2)
        self.quantile_models_ = None
        if self.interval_method == "quantile" and len(r) >= self.min_rows:
            with threadpool_limits(limits=1, user_api="openmp"):
                self.quantile_models_ = tuple(self._booster("quantile", q).fit(X, r) for q in (lo, hi))
        rel = np.abs(np.expm1(-err))  # |predicted − measured| / measured
        self.cv_error_ = {"median_rel_error": float(np.median(rel)) if len(rel) else 0.0,
                          "median_rel_error_analytic": float(np.median(np.abs(np.expm1(-r)))) if len(r) else 0.0,
                          "shrinkage": self.shrinkage_,
                          "p90_rel_error": float(np.quantile(rel, 0.9)) if len(rel) else 0.0,
                          "coverage": float(np.mean((err >= self.residual_quantiles_[0])
                                                    & (err <= self.residual_quantiles_[1]))) if len(err) else 0.0,
                          "rows": len(r),
                          "folds": "groups" if groups is not None and len(np.unique(groups)) >= 2 else "kfold"}
        self.n_train_ = len(r)
        return self

    def _choose_shrinkage(self, r: np.ndarray, oof: np.ndarray) -> float:
        """λ: fixed, or the grid value whose out-of-fold median relative error is lowest (ties: smaller)."""
        if self.shrinkage != "cv":
            return float(self.shrinkage)
        if self.correction == "none" or len(r) < 2:
            return 0.0
        scores = [float(np.median(np.abs(np.expm1(lam * oof - r)))) for lam in SHRINKAGE_GRID]
        return float(SHRINKAGE_GRID[int(np.argmin(scores))])  # argmin returns the first (smallest λ) tie

    def _out_of_fold(self, X: np.ndarray, r: np.ndarray, groups: Sequence[Any] | None) -> np.ndarray:
        """Residual predictions for each row from a correction fitted without its fold."""
        n = len(r)
        if n < 2:
            return np.zeros(n)
        g = np.asarray(groups) if groups is not None else None
        if g is not None and len(np.unique(g)) >= 2:
            splits = list(GroupKFold(n_splits=min(self.cv, len(np.unique(g)))).split(X, r, g))
        else:  # no groups, or one group: plain shuffled folds
            splits = list(KFold(n_splits=min(self.cv, n), shuffle=True, random_state=self.random_state).split(X))
        oof = np.zeros(n)
        for train, test in splits:
            model, offset = self._fit_correction(X[train], r[train])
            oof[test] = self._apply(model, offset, X[test])
        return oof

    # ------------------------------------------------------------------------- predicting

    def _base(self, X: np.ndarray) -> np.ndarray:
        # A row without an analytic base (NaN) starts from speedup 1 and relies on the correction.
        return np.nan_to_num(X[:, self.base_column], nan=0.0)

    def _validated(self, X: Any) -> np.ndarray:
        """Checked float rows; the feature count is checked against ``fit``'s once fitted (before
        fit sklearn skips that check, as for any estimator that needs no fitting)."""
        self._check_params()
        X = validate_data(self, X, reset=False, ensure_all_finite="allow-nan", dtype=np.float64)
        if not 0 <= self.base_column < X.shape[1]:
            raise ValueError(f"base_column {self.base_column} outside the {X.shape[1]} feature(s) of X")
        return X

    def log_correction(self, X: Any) -> np.ndarray:
        """The learned log-correction per row (zeros when unfitted or ``correction="none"``)."""
        X = self._validated(X)
        if not hasattr(self, "n_train_"):
            return np.zeros(len(X))
        return self.shrinkage_ * self._apply(self.correction_, self.offset_, X) * self.in_domain(X)

    def in_domain(self, X: Any) -> np.ndarray:
        """1.0 for rows inside the fitted range of every ``domain_columns`` column (NaN counts as
        inside), else 0.0; all ones when unfitted or without domain columns."""
        X = self._validated(X)
        if getattr(self, "domain_", None) is None:
            return np.ones(len(X))
        cols = list(self.domain_columns)
        lo, hi = self.domain_
        v = X[:, cols]
        inside = np.isnan(v) | ((v >= lo - 1e-9) & (v <= hi + 1e-9))
        return inside.all(axis=1).astype(float)

    def predict(self, X: Any) -> np.ndarray:
        """Predicted speedup: exp(base + correction)."""
        X = self._validated(X)
        return np.exp(self._base(X) + self.log_correction(X))

    def predict_interval(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) of the range at the ``interval`` quantiles.

        Unfitted: ± ``prior_rel_error`` around the base (an assumption until measurements exist).
        """
        X = self._validated(X)
        mean = self.predict(X)
        if not hasattr(self, "n_train_"):
            return mean * (1.0 - self.prior_rel_error), mean * (1.0 + self.prior_rel_error)
        check_is_fitted(self)
        if self.quantile_models_ is not None:
            base = self._base(X)
            lo, hi = (np.exp(base + self._apply(m, 0.0, X)) for m in self.quantile_models_)
            return np.minimum(lo, mean), np.maximum(hi, mean)
        # Rows outside the domain get the analytic model's own out-of-sample spread.
        inside = self.in_domain(X) > 0
        q_lo = np.where(inside, self.residual_quantiles_[0], self.base_quantiles_[0])
        q_hi = np.where(inside, self.residual_quantiles_[1], self.base_quantiles_[1])
        return mean * np.exp(np.minimum(q_lo, 0.0)), mean * np.exp(np.maximum(q_hi, 0.0))
