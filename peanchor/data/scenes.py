"""``scenes``: the embedded default dataset, generated procedurally (no download, seconds to build).

Every image holds one glyph (T, L, plus, H, ring, X, U, F, Z, C) made of thick bars on a smooth
random background. The class is signalled twice:

- by the glyph's **shape**, i.e. how its bars are arranged. Shape survives JPEG and blur, but
  reading it needs to know where the patches are relative to each other;
- by a **fine texture** on the bars (one of ten 2-4 px patterns). With probability
  :data:`OWN_TEXTURE_P` the texture is the class's own, otherwise a random one. Texture is read
  from a single patch, needs no positions, and is exactly what JPEG and blur destroy.

This is the situation in natural images that the study's robustness claim is about: a model that
knows where its patches are can fall back on shape when fine texture is gone; a model without
positional information leans on texture. See docs/scenes.md.

Generation is vectorised numpy over chunks of :data:`CHUNK` images. Chunk ``c`` of a split draws
everything from ``default_rng([GENERATOR_VERSION, seed, split, S, c])``, so a split is a pure
function of its parameters (independent of batch size, workers or call order), and the first full
chunks of a split do not change when ``n`` grows. Splits are cached as ``.npy`` files and
memory-mapped on load.

Imports: numpy, torch; :mod:`peanchor.core.fileio`, :mod:`peanchor.core.errors`.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path

import numpy as np

from peanchor.core.errors import DataError, PeanchorError
from peanchor.core.fileio import atomic_path

GENERATOR_VERSION = 4
CHUNK = 100
SPLITS = {"train": 0, "val": 1}
DEFAULT_SIZES = {"train": 20000, "val": 2000}

# L, F, Z and C are not mirror-symmetric, so scenes are never flipped in training.
SCENES_CLASSES: tuple[str, ...] = ("T", "L", "plus", "H", "ring", "X", "U", "F", "Z", "C")

# Glyph bars as centreline segments (x0, y0, x1, y1) in a unit box (x right, y down), scaled per
# image to the glyph's half extents minus the bar half-width, so that the bars end flush with the
# box. Up to 4 bars per glyph; NaN rows are unused.
_N = np.nan
_UNUSED = [_N] * 4
_GLYPHS = np.array(
    [
        [[-1, -1, 1, -1], [0, -1, 0, 1], _UNUSED, _UNUSED],  # T
        [[-1, -1, -1, 1], [-1, 1, 1, 1], _UNUSED, _UNUSED],  # L
        [[-1, 0, 1, 0], [0, -1, 0, 1], _UNUSED, _UNUSED],  # plus
        [[-1, -1, -1, 1], [1, -1, 1, 1], [-1, 0, 1, 0], _UNUSED],  # H
        [[-1, -1, 1, -1], [-1, 1, 1, 1], [-1, -1, -1, 1], [1, -1, 1, 1]],  # ring (a hollow square)
        [[-1, -1, 1, 1], [-1, 1, 1, -1], _UNUSED, _UNUSED],  # X
        [[-1, -1, -1, 1], [1, -1, 1, 1], [-1, 1, 1, 1], _UNUSED],  # U
        [[-1, -1, -1, 1], [-1, -1, 1, -1], [-1, 0, 0.4, 0], _UNUSED],  # F
        [[-1, -1, 1, -1], [1, -1, -1, 1], [-1, 1, 1, 1], _UNUSED],  # Z
        [[-1, -1, 1, -1], [-1, -1, -1, 1], [-1, 1, 1, 1], _UNUSED],  # C
    ],
    dtype=np.float64,
)  # (10, 4, 4)
SLOTS = _GLYPHS.shape[1]
_DIAGONAL = (_GLYPHS[..., 0] != _GLYPHS[..., 2]) & (_GLYPHS[..., 1] != _GLYPHS[..., 3])  # (10, 4)

# The ten fine textures, as binary patterns of integer texture-cell coordinates (x, y). Periods of
# 2-4 cells; a cell is 1 px at 32 px (max(1, round(S / 32)) px at other sizes).
TEXTURES: tuple[str, ...] = (
    "hstripe2", "vstripe2", "checker1", "diag3", "antidiag3", "hstripe4", "vstripe4", "checker2", "dots2", "grid3",
)  # fmt: skip
OWN_TEXTURE_P = 0.7  # probability that a glyph wears its class's own texture (else one of the ten at random)
TEXTURE_CONTRAST = (0.35, 0.5)  # peak-to-peak luminance swing of the texture on the glyph's colour
GLYPH_SPAN = (15.0, 22.0)  # glyph size, px at 32 px (3.75-5.5 patches of 4 px)
BAR_HALF_WIDTH = (1.8, 2.4)  # bars 3.6-4.8 px thick, px at 32 px

_F = np.float32


def _texture(index: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pattern value in {0, 1} of texture ``index`` at integer cell coordinates (broadcasting)."""
    patterns = [
        y % 2,
        x % 2,
        (x + y) % 2,
        ((x + y) % 3 == 0),
        ((x - y) % 3 == 0),
        (y // 2) % 2,
        (x // 2) % 2,
        (x // 2 + y // 2) % 2,
        (x % 2 == 0) & (y % 2 == 0),
        (x % 3 == 0) | (y % 3 == 0),
    ]
    out = np.zeros(np.broadcast_shapes(index.shape, x.shape, y.shape), dtype=_F)
    for k, p in enumerate(patterns):
        out = np.where(index == k, np.asarray(p, dtype=_F), out)
    return out


def cache_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """``override``, else ``$PEANCHOR_CACHE``, else ``~/.cache/peanchor``."""
    if override:
        return Path(override).expanduser()
    env = os.environ.get("PEANCHOR_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "peanchor"


def cache_key(n: int, img_size: int, seed: int, split: str) -> str:
    params = {
        "generator": "scenes",
        "version": GENERATOR_VERSION,
        "chunk": CHUNK,
        "n": n,
        "img_size": img_size,
        "seed": seed,
        "split": split,
    }
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]
    return f"scenes-v{GENERATOR_VERSION}-{split}-{img_size}px-n{n}-seed{seed}-{digest}"


# ----------------------------------------------------------------------------------------------
# Rendering


def _hsv_to_rgb(h: np.ndarray, s: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Vectorised HSV -> RGB, all in [0, 1]; returns (..., 3)."""
    i = np.floor(h * 6.0)
    f = h * 6.0 - i
    p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
    i = i.astype(np.int64) % 6
    r = np.choose(i, [v, q, p, p, t, v])
    g = np.choose(i, [t, v, v, q, p, p])
    b = np.choose(i, [p, p, t, v, v, q])
    return np.stack([r, g, b], axis=-1)


def _edge(size: int) -> float:
    """Half-width of the glyph's antialiased edge ramp, in px (the glyph stays this far inside the image)."""
    return 0.5 * max(1.0, size / 32.0)


def _layout(
    rng: np.random.Generator, labels: np.ndarray, size: int, own_texture_p: float = OWN_TEXTURE_P
) -> dict[str, np.ndarray]:
    """Per-image glyph parameters, in pixels: :data:`SLOTS` bar slots per image.

    A bar is a thick segment from ``a`` to ``b`` with half-width ``hw``: a box whose flat ends are
    extended by ``ext`` along the segment. The random numbers drawn do not depend on ``own_texture_p``, so
    sets made with another value differ from the real one only in which texture each glyph wears.
    """
    m = len(labels)
    k = size / 32.0  # the design is in pixels at 32 px; everything scales with the image
    u = rng.uniform

    span = u(*GLYPH_SPAN, m) * k
    half = span[:, None] * 0.5 * u(0.9, 1.1, (m, 2))  # (m, 2) half extents x, y: each axis jittered by +-10 %
    hw = u(*BAR_HALF_WIDTH, m) * k  # (m,) bar half-width
    own = u(0.0, 1.0, m) < own_texture_p
    texture = np.where(own, labels, rng.integers(0, len(TEXTURES), m))  # (m,)

    g = _GLYPHS[labels]  # (m, SLOTS, 4)
    diagonal = _DIAGONAL[labels]  # (m, SLOTS)
    inset = hw * np.where(diagonal.any(axis=1), 0.7, 1.0)
    centre_half = half - inset[:, None]  # (m, 2)
    a = np.nan_to_num(g[..., 0:2] * centre_half[:, None, :])  # (m, SLOTS, 2) around the glyph's centre
    b = np.nan_to_num(g[..., 2:4] * centre_half[:, None, :])
    active = ~np.isnan(g[..., 0])  # (m, SLOTS)
    hws = np.broadcast_to(hw[:, None], (m, SLOTS))
    ext = np.where(diagonal, 0.0, hws)  # flat ends flush with the glyph's box

    # Bounding box of the glyph around its centre, from the corners of every bar.
    seg = b - a
    length = np.linalg.norm(seg, axis=-1)
    dirn = np.where(length[..., None] > 1e-9, seg / np.maximum(length, 1e-9)[..., None], [1.0, 0.0])
    nrm = np.stack([-dirn[..., 1], dirn[..., 0]], axis=-1)
    corners = np.stack(
        [p + s * hws[..., None] * nrm for p in (a - ext[..., None] * dirn, b + ext[..., None] * dirn) for s in (-1, 1)],
        axis=2,
    )  # (m, SLOTS, 4, 2)
    on = active[..., None, None]
    lo = np.where(on, corners, np.inf).min(axis=(1, 2)) - _edge(size)  # (m, 2)
    hi = np.where(on, corners, -np.inf).max(axis=(1, 2)) + _edge(size)

    # Place the glyph uniformly where it fits with a 1 px margin.
    free_lo, free_hi = 1.0 - lo, size - 1.0 - hi
    free_hi = np.maximum(free_hi, free_lo)  # too big to fit: pin to the top-left margin
    origin = free_lo + u(0.0, 1.0, (m, 2)) * (free_hi - free_lo)

    return {
        "a": a + origin[:, None, :],  # (m, SLOTS, 2) x, y in pixels
        "b": b + origin[:, None, :],
        "hw": np.ascontiguousarray(hws),  # (m, SLOTS) half-width
        "ext": ext,  # (m, SLOTS) flat-end extension
        "active": active,  # (m, SLOTS)
        "box": np.stack([lo, hi], axis=1) + origin[:, None, :],  # (m, 2, 2): drawn extent incl. the edge ramp
        "texture": texture,  # (m,) index into TEXTURES
        "offset": rng.integers(0, 12, (m, 2)),  # texture phase: the pattern is not tied to the pixel grid
        "invert": rng.integers(0, 2, m),  # the pattern or its complement
        "colour": _hsv_to_rgb(u(0, 1, m), u(0.5, 1.0, m), u(0.6, 1.0, m)),  # (m, 3): not a class cue
        "contrast": u(*TEXTURE_CONTRAST, m),
    }


def _render_chunk(
    rng: np.random.Generator, labels: np.ndarray, size: int, own_texture_p: float = OWN_TEXTURE_P
) -> np.ndarray:
    """Render ``len(labels)`` scenes; returns uint8 ``(m, 3, S, S)``.

    Channel-first float32 throughout: per-pixel masks are ``(m, 1, S, S)`` and broadcast over
    contiguous channel planes. The glyph is drawn in a small per-image window.
    """
    m = len(labels)
    # Every random number is drawn here, in a fixed order: that order *is* the dataset.
    background = _draw_background(rng, m)
    layout = _layout(rng, labels, size, own_texture_p)
    grain_scale = rng.uniform(0.015, 0.035, m).astype(_F) * _F(np.sqrt(12.0) / 255.0)  # uniform noise, std 1.5-3.5 %
    grain = np.frombuffer(rng.bytes(m * 3 * size * size), dtype=np.uint8).reshape(m, 3, size, size)

    image = _render_background(background, size)  # (m, 3, S, S) in [0, 1]-ish
    _draw_glyph(image, layout, size)
    # To 0..255 with the grain folded in: image * 255 + (grain - 127.5) * scale * 255 + 0.5 (rounding).
    scale255 = (grain_scale * _F(255.0))[:, None, None, None]
    image *= _F(255.0)
    image += np.multiply(grain, scale255, dtype=_F)
    image += _F(0.5) - _F(127.5) * scale255
    return np.clip(image, 0, 255, out=image).astype(np.uint8)  # (m, 3, S, S)


def _draw_background(rng: np.random.Generator, m: int) -> dict[str, np.ndarray]:
    u = rng.uniform
    return {
        "horizon": u(0.4, 0.65, m),  # height of the horizon at the centre column, fraction of S
        "tilt": u(-0.15, 0.15, m),  # horizon slope
        "zenith": np.stack([u(0.05, 0.25, m), u(0.15, 0.4, m), u(0.45, 0.75, m)], 1),  # sky colour at the top
        "haze": np.stack([u(0.65, 0.85, m), u(0.72, 0.9, m), u(0.8, 0.98, m)], 1),  # sky at the horizon
        "ground": np.stack([u(0.25, 0.55, m), u(0.3, 0.55, m), u(0.08, 0.25, m)], 1),
        "furrow_freq": u(0.3, 0.45, m),
        "furrow_phase": u(0.0, 2 * np.pi, m),
    }


def _col(a: np.ndarray) -> np.ndarray:  # (m,) -> (m, 1, 1, 1)
    return np.asarray(a, dtype=_F)[:, None, None, None]


def _rgb(a: np.ndarray) -> np.ndarray:  # (m, 3) -> (m, 3, 1, 1)
    return np.asarray(a, dtype=_F)[:, :, None, None]


def _render_background(bg: dict[str, np.ndarray], size: int) -> np.ndarray:
    """Sky above a tilted horizon, hazy ground with perspective furrows below: the same layout in every image."""
    px = (np.arange(size, dtype=_F) + 0.5) / size  # pixel centres as fractions of the side
    u, v = px[None, None, None, :], px[None, None, :, None]  # (1, 1, 1, S) column, (1, 1, S, 1) row
    horizon = _col(bg["horizon"]) + _col(bg["tilt"]) * (u - 0.5)  # (m, 1, 1, S)
    zenith, haze = _rgb(bg["zenith"]), _rgb(bg["haze"])
    t_sky = np.minimum(v / horizon, 1.0)  # (m, 1, S, S): 0 at the top, 1 at the horizon
    image = zenith + (haze - zenith) * (t_sky * (2.0 - t_sky))  # (m, 3, S, S)
    depth = np.clip((v - horizon) / (1.0 - horizon), 0.0, 1.0)  # 0 at the horizon, 1 at the bottom edge
    # Furrows whose spacing shrinks towards the horizon (perspective).
    furrows = np.sin(_F(2 * np.pi) * _col(bg["furrow_freq"]) / (depth + _F(0.12)) + _col(bg["furrow_phase"]))
    ground = haze + (_rgb(bg["ground"]) - haze) * np.minimum(depth * 4.0, 1.0)  # hazy far away
    ground *= (1.05 - 0.45 * depth) * (1.0 + 0.08 * furrows)
    below = np.clip((v - horizon) * size + 0.5, 0.0, 1.0)  # soft 1 px horizon
    image += (ground - image) * below
    return image


def _draw_glyph(image: np.ndarray, lay: dict[str, np.ndarray], size: int) -> None:
    """Draw the textured glyph into ``image`` in place, each in a ``win x win`` window."""
    m = image.shape[0]
    cell = max(1, round(size / 32.0))  # texture cell in pixels: fine at every size
    ramp = _edge(size)
    box = lay["box"]  # (m, 2, 2)
    win = min(size, int(np.ceil((box[:, 1] - box[:, 0]).max())) + 2)
    steps = np.arange(win)
    everyone = np.arange(m)
    # windows[i, :, y, x] is the (3, win, win) view of image i at top-left (y, x): gathering and
    # scattering through it copies contiguous rows, far cheaper than 4-array fancy indexing.
    windows = np.lib.stride_tricks.sliding_window_view(image, (win, win), axis=(2, 3), writeable=True)
    x0 = np.clip(np.floor(box[:, 0, 0]).astype(np.int64), 0, size - win)
    y0 = np.clip(np.floor(box[:, 0, 1]).astype(np.int64), 0, size - win)
    rows, cols = (y0[:, None] + steps)[:, None, :, None], (x0[:, None] + steps)[:, None, None, :]
    px, py = cols.astype(_F) + _F(0.5), rows.astype(_F) + _F(0.5)  # (m, 1, 1, W), (m, 1, W, 1) pixel centres
    patch = windows[everyone, :, y0, x0]  # (m, 3, W, W), a copy

    sdf = _union_sdf(px, py, lay)  # (m, 1, W, W), < 0 inside
    tx = (cols + lay["offset"][:, 0, None, None, None]) // cell  # texture cells, in image coordinates
    ty = (rows + lay["offset"][:, 1, None, None, None]) // cell
    pattern = _texture(lay["texture"][:, None, None, None], tx, ty)  # (m, 1, W, W) in {0, 1}
    invert = _col(lay["invert"])
    tex = pattern + invert - 2.0 * pattern * invert  # pattern XOR invert
    # Additive luminance swing around the colour: the same contrast on a dark glyph as on a light one.
    body = np.clip(_rgb(lay["colour"]) + _col(lay["contrast"]) * (tex - 0.5), 0.0, 1.0)  # (m, 3, W, W)
    coverage = np.clip((ramp - sdf) / (2 * ramp), 0.0, 1.0)  # antialiased edge, no outline
    patch += (body - patch) * coverage
    windows[everyone, :, y0, x0] = patch


def _union_sdf(px: np.ndarray, py: np.ndarray, lay: dict[str, np.ndarray]) -> np.ndarray:
    """Signed distance (pixels, < 0 inside) to the union of an image's active bars, at pixel
    centres ``px (m, 1, 1, W)``, ``py (m, 1, W, 1)``."""
    best = None
    for j in range(lay["a"].shape[1]):
        ax, ay = _col(lay["a"][:, j, 0]), _col(lay["a"][:, j, 1])
        sx, sy = lay["b"][:, j, 0] - lay["a"][:, j, 0], lay["b"][:, j, 1] - lay["a"][:, j, 1]
        length = np.hypot(sx, sy)
        safe = np.maximum(length, 1e-9)
        dx, dy = np.where(length > 1e-9, sx / safe, 1.0), np.where(length > 1e-9, sy / safe, 0.0)
        ex, ey = px - ax, py - ay  # from the segment's start
        along = ex * _col(dx) + ey * _col(dy)  # (m, 1, W, W)
        across = ey * _col(dx) - ex * _col(dy)
        hw, half = _col(lay["hw"][:, j]), _col(length / 2.0)
        s = np.maximum(np.abs(along - half) - half - _col(lay["ext"][:, j]), np.abs(across) - hw)
        s = np.where(_col(lay["active"][:, j]) > 0.5, s, _F(np.inf))
        best = s if best is None else np.minimum(best, s)
    assert best is not None
    return best


def generate_scenes(
    n: int, *, img_size: int = 32, seed: int = 0, split: str = "train", own_texture_p: float = OWN_TEXTURE_P
) -> tuple[np.ndarray, np.ndarray]:
    """Render a split: uint8 images ``(n, 3, S, S)`` and int64 labels ``(n,)``, without caching.

    Labels are balanced within every chunk of :data:`CHUNK` images (exactly balanced when ``n`` is
    a multiple of 10 within each chunk). ``own_texture_p`` makes counterfactual copies of a split for
    calibration: 1.0 gives every glyph its class's texture, 0.0 a random one; everything else (the glyphs,
    their places and colours, the backgrounds) is the same image for image.
    """
    if not 0.0 <= own_texture_p <= 1.0:
        raise DataError(f"own_texture_p={own_texture_p!r}: expected a probability in [0, 1]")
    if split not in SPLITS:
        raise DataError(f"scenes split {split!r}: expected one of {', '.join(SPLITS)}")
    images = np.empty((n, 3, img_size, img_size), dtype=np.uint8)
    labels = np.empty(n, dtype=np.int64)
    for c, start in enumerate(range(0, n, CHUNK)):
        m = min(CHUNK, n - start)
        rng = np.random.default_rng([GENERATOR_VERSION, seed, SPLITS[split], img_size, c])
        chunk_labels = rng.permutation(np.arange(m) % len(SCENES_CLASSES))
        images[start : start + m] = _render_chunk(rng, chunk_labels, img_size, own_texture_p)
        labels[start : start + m] = chunk_labels
    return images, labels


def load_scenes(
    n: int, *, img_size: int = 32, seed: int = 0, split: str = "train", cache: str | os.PathLike[str] | None = None
) -> tuple[np.ndarray, np.ndarray, Path | None]:
    """A split from the cache (memory-mapped), generating and caching it on a miss.

    Returns ``(images, labels, images_path)``; ``images_path`` is None when the cache directory is
    not writable (the split then lives in memory, with a warning).
    """
    base = cache_dir(cache) / "scenes" / cache_key(n, img_size, seed, split)
    images_path, labels_path = Path(f"{base}.images.npy"), Path(f"{base}.labels.npy")
    if images_path.exists() and labels_path.exists():
        try:
            images, labels = np.load(images_path, mmap_mode="r"), np.load(labels_path)
            if images.shape == (n, 3, img_size, img_size) and labels.shape == (n,):
                return images, labels, images_path
        except (OSError, ValueError):
            pass  # unreadable cache entry: regenerate over it
    images, labels = generate_scenes(n, img_size=img_size, seed=seed, split=split)
    try:
        # Labels first: the images file is the entry's commit mark.
        with atomic_path(labels_path) as tmp:
            np.save(tmp, labels)
        with atomic_path(images_path) as tmp:
            np.save(tmp, images)
    except PeanchorError as e:
        warnings.warn(f"scenes cache not written ({e}); keeping the {split} split in memory", stacklevel=2)
        return images, labels, None
    return np.load(images_path, mmap_mode="r"), labels, images_path


def save_sample_grid(
    path: str | os.PathLike[str], *, per_class: int = 8, img_size: int = 32, seed: int = 0, scale: int = 2
) -> Path:
    """Save a PNG grid, one row per class (named on the left), ``per_class`` val examples per row,
    each upscaled ``scale`` times with nearest neighbour. Returns the path."""
    from PIL import Image, ImageDraw

    n = CHUNK * -(-per_class * len(SCENES_CLASSES) // CHUNK)  # whole chunks: each holds CHUNK/10 per class
    images, labels = generate_scenes(n, img_size=img_size, seed=seed, split="val")
    tile, pad, label_w = img_size * scale, 2, 120
    rows = len(SCENES_CLASSES)
    canvas = np.full((rows * (tile + pad) + pad, label_w + per_class * (tile + pad) + pad, 3), 255, dtype=np.uint8)
    for r in range(rows):
        picks = np.flatnonzero(labels == r)[:per_class]
        for c, i in enumerate(picks):
            img = images[i].transpose(1, 2, 0).repeat(scale, 0).repeat(scale, 1)  # nearest upscale
            y, x = pad + r * (tile + pad), label_w + pad + c * (tile + pad)
            canvas[y : y + tile, x : x + tile] = img
    picture = Image.fromarray(canvas)
    draw = ImageDraw.Draw(picture)
    for r, name in enumerate(SCENES_CLASSES):
        draw.text((4, pad + r * (tile + pad) + tile // 2 - 6), f"{r} {name}", fill=(0, 0, 0))
    # A 256-colour palette keeps the file small (noise compresses badly) without visible loss.
    picture = picture.quantize(colors=256, method=Image.Quantize.FASTOCTREE)
    target = Path(path)
    with atomic_path(target) as tmp:
        picture.save(tmp, format="PNG", optimize=True)
    return target
