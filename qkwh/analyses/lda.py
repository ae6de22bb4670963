"""Two-class linear discriminant (Q vs K) from class moments, and its in-sample accuracy."""

from __future__ import annotations

import numpy as np

from qkwh.analyses.correlation import is_zero_variance

__all__ = ["lda_direction", "lda_accuracy_from_scores", "lda_accuracy"]


def lda_direction(
    mu_q: np.ndarray,
    mu_k: np.ndarray,
    s_w: np.ndarray,
    n_q: int,
    n_k: int,
    *,
    scale: np.ndarray | float,
) -> tuple[np.ndarray, np.ndarray]:
    """Two-class linear discriminant w, w0 for P problems at once: predict Q iff zᵀw + w0 > 0.

    Priors are the class frequencies (equal priors not imposed); ``s_w`` is the pooled
    within-class covariance, i.e. the within-class scatter divided by N (``qk_acc_pc01``,
    docs/metrics/pca.md).  A tie (zᵀw + w0 = 0) goes to K, sklearn's first class.

    Parameters
    ----------
    mu_q, mu_k : (P, k) class means
    s_w : (P, k, k) pooled within-class covariance
    n_q, n_k : class sizes (both >= 1)
    scale : (P,) or scalar raw mean square of the features (zero-variance rule)

    Returns
    -------
    w : (P, k), w0 : (P,) — NaN rows where the features have zero within-class spread
    """
    tr = np.trace(s_w, axis1=1, axis2=2)
    w = np.einsum("pij,pj->pi", np.linalg.pinv(s_w, rcond=1e-12, hermitian=True), mu_q - mu_k)
    w0 = -0.5 * np.einsum("pi,pi->p", mu_q + mu_k, w) + np.log(n_q / n_k)
    bad = is_zero_variance(tr, scale)
    return np.where(bad[:, None], np.nan, w), np.where(bad, np.nan, w0)


def lda_accuracy_from_scores(score: np.ndarray, n_q: int) -> np.ndarray:
    """Accuracy of ``score > 0`` ⇔ Q for (N, P) scores whose first ``n_q`` rows are queries.

    NaN for problems whose score column contains NaN.
    """
    correct = np.count_nonzero(score[:n_q] > 0, axis=0) + np.count_nonzero(score[n_q:] <= 0, axis=0)
    acc = correct / score.shape[0]
    return np.where(np.isnan(score[0]), np.nan, acc)


def lda_accuracy(z: np.ndarray, is_q: np.ndarray) -> float:
    """In-sample accuracy of the two-class LDA of :func:`lda_direction` on features ``z``.

    Parameters
    ----------
    z : (N,) or (N, k) features
    is_q : (N,) bool labels (True = query row)

    Returns
    -------
    accuracy in [0, 1]; NaN if a class is empty or the features are constant within classes.
    """
    z = np.asarray(z, dtype=np.float64)
    if z.ndim == 1:
        z = z[:, None]
    lab = np.asarray(is_q, dtype=bool)
    n = z.shape[0]
    n_q = int(lab.sum())
    if n_q == 0 or n_q == n:
        return float("nan")
    mu_q, mu_k = z[lab].mean(axis=0), z[~lab].mean(axis=0)
    zc = z - np.where(lab[:, None], mu_q, mu_k)
    s_w = (zc.T @ zc) / n
    w, w0 = lda_direction(
        mu_q[None], mu_k[None], s_w[None], n_q, n - n_q, scale=float(np.mean(z * z)) * z.shape[1]
    )
    if np.isnan(w0[0]):
        return float("nan")
    score = z @ w[0] + w0[0]
    return float(np.mean((score > 0) == lab))
