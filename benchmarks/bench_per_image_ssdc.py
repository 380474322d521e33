"""Per-image SSDC: ``SSDCAccumulator(mode="per_image")`` vs a scipy loop (``spearmanr`` per image per layer).

    python3 benchmarks/bench_per_image_ssdc.py --threads 1   # N=196 (14x14), L=12, batch 256, D=384
    python3 benchmarks/bench_per_image_ssdc.py --quick       # batch 64, D=64

Both start from the same tokens ``(B, L, N, D)``: random features plus a smooth 2D code of the
token position, so that SSDC is not just noise. The scipy loop does what a user without peanchor
would: per image and layer, normalise the tokens, form the cosine-similarity matrix with numpy and
call ``scipy.stats.spearmanr`` on its upper triangle against ``-D``.

The scipy loop over all ``B x L`` matrices would take long, so it is timed on the first
``--scipy-images`` images and its time is scaled linearly to ``B`` (each matrix costs the same).
The results are checked equal to 1e-6: per image (peanchor's ``ssdc`` of each similarity matrix)
and per layer (the accumulator's mean over those images).

Threads: ``--threads N`` sets torch's intra-op threads and also numpy's BLAS threads (through
``OPENBLAS_NUM_THREADS``/``MKL_NUM_THREADS``/``OMP_NUM_THREADS``, which must be set before numpy is
first imported, so only when the script is run as a program). ``torch.set_num_threads`` does not
reach numpy's BLAS pool, which the scipy loop's matmul uses: with two OpenBLAS threads on this
shared two-core machine one measurement of a 196 x 384 similarity matmul took 8 ms instead of 0.2 ms
while other jobs ran, and the scipy loop ran about 3x slower than with one BLAS thread. The record
says which BLAS thread setting was in force (``machine.blas_threads``).

Goal (CPU): scipy (scaled to B) / peanchor >= 10 (issue 12; the GPU goal, >= 50, is bench_gpu's).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")


def pin_blas_threads(argv: list[str]) -> None:
    """Give numpy's BLAS the ``--threads`` value of ``argv``, unless numpy is loaded or the variables are set."""
    if "numpy" in sys.modules:
        return  # too late to matter: the BLAS pool is sized when numpy loads
    for i, arg in enumerate(argv):
        value = arg.split("=", 1)[1] if arg.startswith("--threads=") else None
        if arg == "--threads" and i + 1 < len(argv):
            value = argv[i + 1]
        if value is not None and value.isdigit():
            for var in BLAS_THREAD_VARIABLES:
                os.environ.setdefault(var, value)


if __name__ == "__main__":
    pin_blas_threads(sys.argv[1:])

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_common as bc
import numpy as np
import torch

from peanchor.metrics import SSDCAccumulator, grid_distances, ssdc
from peanchor.pe.absolute import sincos_2d

NAME = "per_image_ssdc"
GOAL = 10.0
TOLERANCE = 1e-6


def make_tokens(batch: int, layers: int, grid: tuple[int, int], dim: int, seed: int = 0) -> torch.Tensor:
    """``(B, L, N, D)`` float32: noise plus a positional code whose weight grows with the layer."""
    g = torch.Generator().manual_seed(seed)
    n = grid[0] * grid[1]
    noise = torch.randn(batch, layers, n, dim, generator=g)  # (B, L, N, D)
    code = sincos_2d(grid, dim - dim % 4 or 4)[:, :dim]  # (N, D')
    code = torch.nn.functional.pad(code, (0, dim - code.shape[1]))  # (N, D)
    weight = torch.linspace(0.0, 2.0, layers).view(1, layers, 1, 1)
    return noise + weight * code  # (B, L, N, D)


def scipy_per_image(tokens: np.ndarray, grid: tuple[int, int]) -> np.ndarray:
    """``(B, L)`` SSDC of every image's own similarity matrix, one ``spearmanr`` call each."""
    from scipy.stats import spearmanr

    dist = grid_distances(grid).numpy()
    iu = np.triu_indices(dist.shape[0], k=1)
    neg_dist = -dist[iu]
    b, num_layers = tokens.shape[:2]
    out = np.empty((b, num_layers))
    for i in range(b):
        for layer in range(num_layers):
            x = tokens[i, layer]  # (N, D)
            unit = x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)
            sim = unit @ unit.T  # (N, N)
            out[i, layer] = spearmanr(sim[iu], neg_dist)[0]
    return out


def run(
    batch: int, layers: int, grid: tuple[int, int], dim: int, scipy_images: int, reps: int, device: str = "cpu"
) -> dict[str, Any]:
    """``device``: where peanchor's side runs (the tokens are moved there before timing; CUDA is synchronised)."""
    tokens = make_tokens(batch, layers, grid, dim)
    tokens_np = tokens.numpy()
    on_device = tokens.to(device)
    sub = min(scipy_images, batch)
    print(
        f"per-image SSDC: B={batch}, L={layers}, N={grid[0] * grid[1]}, D={dim}; scipy timed on {sub} images "
        f"({sub * layers} matrices) and scaled x{batch / sub:g} to B={batch}; {reps} reps",
        flush=True,
    )
    results: dict[str, Any] = {}

    def ours() -> None:
        acc = SSDCAccumulator(grid, mode="per_image")
        acc.update(on_device)
        results["ours"] = acc.compute().cpu()  # (L,); the copy waits for the device

    def scipy_loop() -> None:
        results["scipy"] = scipy_per_image(tokens_np[:sub], grid)  # (sub, L)

    times = bc.interleaved({"peanchor": ours, "scipy_subset": scipy_loop}, reps=reps, warmup=1)

    # Equality: per image, and the accumulator's per-layer mean over the same images.
    unit = torch.nn.functional.normalize(tokens[:sub], dim=-1, eps=1e-12)
    per_image = ssdc(unit @ unit.transpose(-1, -2), grid).numpy()  # (sub, L)
    acc = SSDCAccumulator(grid, mode="per_image")
    acc.update(on_device[:sub])
    per_layer = acc.compute().cpu().numpy()  # (L,), computed where it was timed
    reference = results["scipy"]
    diff_image = float(np.max(np.abs(per_image - reference)))
    diff_layer = float(np.max(np.abs(per_layer - reference.mean(axis=0))))
    if not (diff_image <= TOLERANCE and diff_layer <= TOLERANCE):
        raise AssertionError(f"per-image SSDC differs from scipy: {diff_image:g} per image, {diff_layer:g} per layer")

    scale = batch / sub
    scipy_scaled = [t * scale for t in times["scipy_subset"]]
    record: dict[str, Any] = {
        "device": str(device),
        "batch": batch,
        "layers": layers,
        "grid": list(grid),
        "dim": dim,
        "matrices": batch * layers,
        "scipy_images_timed": sub,
        "scipy_scale": scale,
        "reps": reps,
        "times": bc.all_stats(times),
        "scipy_scaled_median_s": bc.median(scipy_scaled),
        "peanchor_ms_per_matrix": bc.median(times["peanchor"]) * 1e3 / (batch * layers),
        "scipy_ms_per_matrix": bc.median(times["scipy_subset"]) * 1e3 / (sub * layers),
        "ratio": bc.ratio(scipy_scaled, times["peanchor"]),
        "ratio_of_min": bc.ratio_of_min(scipy_scaled, times["peanchor"]),
        "ratio_paired": bc.paired_ratio(scipy_scaled, times["peanchor"]),
        "ratio_cpu_time": bc.ratio([t * scale for t in times.cpu["scipy_subset"]], times.cpu["peanchor"]),
        "max_abs_diff_per_image": diff_image,
        "max_abs_diff_per_layer": diff_layer,
        "equal_within": TOLERANCE,
        "ssdc_per_layer": results["ours"].tolist(),
        "note": f"scipy time measured on {sub} of {batch} images and scaled linearly",
    }
    record["verdict"] = bc.verdict(record["ratio"], GOAL, True)
    print(
        f"  peanchor {bc.median(times['peanchor']):.3f} s for {batch * layers} matrices; scipy "
        f"{bc.median(times['scipy_subset']):.3f} s for {sub * layers} -> {record['scipy_scaled_median_s']:.2f} s scaled"
    )
    print(
        f"  scipy / peanchor = {record['ratio']:.1f}x (goal >= {GOAL:g}x) -> {record['verdict']} "
        f"(paired {record['ratio_paired']:.1f}x); "
        f"max |diff| {max(diff_image, diff_layer):.1e}"
    )
    return record


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = bc.parser(__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--grid", type=int, default=14, help="grid side (N = side^2)")
    p.add_argument("--dim", type=int, default=None)
    p.add_argument("--scipy-images", type=int, default=None, help="images the scipy loop is timed on")
    p.add_argument("--reps", type=int, default=None)
    args = p.parse_args(argv)
    bc.apply_threads(args.threads)
    machine = bc.machine_info()
    batch = args.batch or (64 if args.quick else 256)
    dim = args.dim or (64 if args.quick else 384)
    scipy_images = args.scipy_images or (4 if args.quick else 16)
    reps = args.reps or (2 if args.quick else 5)
    record = run(batch, args.layers, (args.grid, args.grid), dim, scipy_images, reps)
    machine["blas_threads"] = {var: os.environ.get(var) for var in BLAS_THREAD_VARIABLES}
    record.update(goal=f"scipy / peanchor >= {GOAL:g}", quick=args.quick, machine=bc.finish_machine_info(machine))
    if not args.no_write:
        bc.write_record(NAME + ("_quick" if args.quick else ""), record, args.out)
    return record


if __name__ == "__main__":
    main()
