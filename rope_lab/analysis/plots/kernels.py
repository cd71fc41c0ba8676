"""Kernel heatmaps: a train kernel and a cross kernel on one colour scale next to a position
profile, drawn from arrays or from an ``.npz`` file."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import seaborn as sns
from matplotlib import colors as mcolors
from matplotlib.figure import Figure
from matplotlib.gridspec import GridSpec

from rope_lab.analysis.plots.axes import mark_train_length
from rope_lab.analysis.plots.layout import finish
from rope_lab.analysis.plots.style import styled
from rope_lab.analysis.query import QueryError
from rope_lab.registry import PLOTS


@styled
def plot_kernel_matrices(
    K_train: Any,
    K_cross: Any,
    profile: Any,
    *,
    train_length: int | None = None,
    positions: Any = None,
    profile_label: str = "kernel profile",
    robust: bool = True,
    title: str = "Empirical NTK between positions",
    out: str | Path | None = None,
) -> Figure:
    """Heatmaps of a train kernel ``K_train`` (n x n over training positions) and a cross
    kernel ``K_cross`` (n x m: training positions x long-probe positions) on one colour scale,
    and a position ``profile`` (1-D over positions, or a mapping label -> array) with L_train
    dashed. ``robust``: colour limits at the 98th percentile of |K| (NTKs are heavy-tailed).

    Kernels are not stored by sweeps: compute them (e.g. ``rope_lab.ntk.kernels.position_kernel``)
    and
    pass arrays.
    """
    kt = np.asarray(K_train, dtype=float)
    kc = np.asarray(K_cross, dtype=float)
    if kt.ndim != 2 or kc.ndim != 2:
        raise ValueError(f"K_train and K_cross must be 2-D, got {kt.shape} and {kc.shape}")
    profiles = (
        {str(k): np.asarray(v, dtype=float) for k, v in profile.items()}
        if isinstance(profile, Mapping)
        else {"profile": np.asarray(profile, dtype=float)}
    )
    for name, p in profiles.items():
        if p.ndim != 1:
            raise ValueError(f"profile {name!r} must be 1-D, got shape {p.shape}")
    n_train = train_length if train_length is not None else kt.shape[0]
    fig = Figure(figsize=(15.5, 4.6), layout="constrained")
    gs = GridSpec(
        1, 3, figure=fig, width_ratios=[1, kc.shape[1] / max(kc.shape[0], 1) * 0.8 + 0.2, 1.1]
    )
    ax_t, ax_c, ax_p = (fig.add_subplot(gs[0, i]) for i in range(3))
    both = np.concatenate([kt[np.isfinite(kt)], kc[np.isfinite(kc)]])
    vmax = float(np.percentile(np.abs(both), 98 if robust else 100)) if both.size else 1.0
    vmax = vmax if vmax > 0 else 1.0
    clipped = bool(robust and both.size and float(np.max(np.abs(both))) > vmax)
    signed = bool(both.size and both.min() < 0)
    for ax, k, xlabel, ylabel, name in (
        (ax_t, kt, "training position j", "training position i", "K_train"),
        (ax_c, kc, "long-probe position j", "training position i", "K_cross"),
    ):
        norm = (
            mcolors.TwoSlopeNorm(vcenter=0.0, vmin=-vmax, vmax=vmax)
            if signed
            else mcolors.Normalize(vmin=0.0, vmax=vmax)
        )
        im = ax.imshow(
            k,
            cmap="RdBu_r" if signed else "viridis",
            norm=norm,
            aspect="auto",
            interpolation="nearest",
            origin="upper",
        )
        ax.grid(False)
        fig.colorbar(
            im,
            ax=ax,
            shrink=0.85,
            label="kernel value" + (" (clipped at 98th pct.)" if clipped else ""),
            extend="both" if clipped and signed else "max" if clipped else "neither",
        )
        ax.set_title(f"{name} ({k.shape[0]}×{k.shape[1]})")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if name == "K_cross" and k.shape[1] > n_train:
            ax.axvline(
                n_train - 0.5, color="white" if not signed else "0.2", linestyle="--", linewidth=1.2
            )
    palette = sns.color_palette("tab10", len(profiles))
    for (name, p), color in zip(profiles.items(), palette, strict=True):
        xs = np.asarray(positions, dtype=float) if positions is not None else np.arange(p.size)
        if xs.shape != p.shape:
            raise ValueError(f"positions has shape {xs.shape}, profile {name!r} {p.shape}")
        ax_p.plot(xs, p, color=color, linewidth=1.6, label=name)
    mark_train_length(ax_p, [n_train])
    ax_p.set_xlabel("position (tokens)")
    ax_p.set_ylabel(profile_label)
    ax_p.set_title("position profile")
    if len(profiles) > 1:
        ax_p.legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    return finish(fig, out)


def load_kernel_arrays(path: str | Path) -> dict[str, Any]:
    """Arrays for :func:`plot_kernel_matrices` from an ``.npz`` (keys K_train, K_cross,
    profile; optional positions, train_length, profile_label), or the first such file under a
    folder."""
    path = Path(path)
    candidates = [path] if path.is_file() else sorted(path.rglob("*.npz")) if path.is_dir() else []
    keys = ("K_train", "K_cross", "profile", "positions", "train_length", "profile_label")
    for f in candidates:
        try:
            with np.load(f, allow_pickle=False) as z:
                if not {"K_train", "K_cross", "profile"} <= set(z.files):
                    continue
                arrays: dict[str, Any] = {k: z[k] for k in keys if k in z.files}
        except (OSError, ValueError):
            continue
        if "train_length" in arrays:
            arrays["train_length"] = int(arrays["train_length"])
        if "profile_label" in arrays:
            arrays["profile_label"] = str(arrays["profile_label"])
        return arrays
    raise QueryError(
        f"no kernel arrays found in {path}: the kernel plot needs an .npz with K_train, K_cross "
        "and profile (kernels are not stored by sweeps; see "
        "rope_lab.analysis.plots.plot_kernel_matrices)"
    )


@PLOTS.register("kernel")
def kernel(source: str | Path, *, out: str | Path | None = None) -> Figure:
    """Heatmaps of kernel arrays in an .npz: K_train, K_cross, profile.

    :func:`plot_kernel_matrices` of the arrays in an ``.npz`` file (or the first found in a
    folder).
    """
    if isinstance(source, list | tuple):
        raise QueryError("the kernel plot takes one .npz file or folder")
    arrays = load_kernel_arrays(source)
    return plot_kernel_matrices(
        arrays["K_train"],
        arrays["K_cross"],
        arrays["profile"],
        train_length=arrays.get("train_length"),
        positions=arrays.get("positions"),
        profile_label=arrays.get("profile_label", "kernel profile"),
        title=f"Empirical NTK between positions ({Path(source).name})",
        out=out,
    )
