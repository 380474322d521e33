"""``scenes``: the embedded default dataset, generated procedurally (no download, seconds to build).

Every image is a small outdoor scene with a consistent global layout (sky above, ground below a
tilted horizon, sun on a random side, a fine left-to-right chirp) and one object. Labels 0-5 are glyphs (T, L, plus, H,
ring, X) made of thick textured bars: the class is the glyph's shape, i.e. how its bars are
arranged, and their patches are partly shared, so content gets a model part of the way and knowing
where patches are helps with the rest. Labels 6-9 are a striped disc and a checkered square, with
the disc above / below / left of / right of the square: every such class is made of the same
patches, so a bag of patches cannot tell them apart and the model has to know where its patches
are. The layout gives a model without positional encoding a content-driven cue ("ghost map") of
where a patch is; fine textures and grain make that cue fragile to JPEG and blur. See
docs/scenes.md.

Generation is vectorised numpy over chunks of :data:`CHUNK` images. Chunk ``c`` of a split draws
everything from ``default_rng([GENERATOR_VERSION, seed, split, S, c])``, so a split is a pure
function of its parameters (independent of batch size, workers or call order), and the first full
chunks of a split do not change when ``n`` grows. Splits are cached as ``.npy`` files and
memory-mapped on load.

Imports: numpy, torch; :mod:`peanchor.fileio`, :mod:`peanchor.errors`.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path

import numpy as np

from peanchor.errors import DataError, PeanchorError
from peanchor.fileio import atomic_path

GENERATOR_VERSION = 3
CHUNK = 100
SPLITS = {"train": 0, "val": 1}
DEFAULT_SIZES = {"train": 20000, "val": 2000}

# Labels 0-5: a glyph whose identity is its shape (the arrangement of its bars). Labels 6-9: a
# striped disc and a checkered square, where the disc sits relative to the square. Left/right are
# distinct classes and the L is not mirror-symmetric, so scenes are never flipped in training.
SCENES_CLASSES: tuple[str, ...] = (
    "T",
    "L",
    "plus",
    "H",
    "ring",  # a hollow square
    "X",  # a diagonal cross
    "disc_above",
    "disc_below",
    "disc_left",
    "disc_right",
)
NUM_GLYPHS = 6

# Glyph bars as centreline segments (x0, y0, x1, y1) in a unit box (x right, y down), scaled per
# image to the glyph's half extents minus the bar half-width, so that the bars end flush with the box.
# Up to 4 bars per glyph; NaN rows are unused.
_N = np.nan
_GLYPHS = np.array(
    [
        [[-1, -1, 1, -1], [0, -1, 0, 1], [_N] * 4, [_N] * 4],  # T
        [[-1, -1, -1, 1], [-1, 1, 1, 1], [_N] * 4, [_N] * 4],  # L
        [[-1, 0, 1, 0], [0, -1, 0, 1], [_N] * 4, [_N] * 4],  # plus
        [[-1, -1, -1, 1], [1, -1, 1, 1], [-1, 0, 1, 0], [_N] * 4],  # H
        [[-1, -1, 1, -1], [-1, 1, 1, 1], [-1, -1, -1, 1], [1, -1, 1, 1]],  # ring
        [[-1, -1, 1, 1], [-1, 1, 1, -1], [_N] * 4, [_N] * 4],  # X
    ],
    dtype=np.float64,
)  # (6, 4, 4)
SLOTS = _GLYPHS.shape[1]

# Unit offsets (x right, y down) of the disc from the square for the four relation classes.
_DIRECTIONS = np.array([[0, -1], [0, 1], [-1, 0], [1, 0]], dtype=np.float64)

_F = np.float32
CHIRP_CYCLES = (0.18, 0.45)  # cycles per pixel of the background chirp at the left and right edges


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


def _outline(size: int) -> float:
    return max(1.0, 0.8 * size / 32.0)


def _shadow_offset(size: int) -> float:
    return 1.5 * size / 32.0


def _layout(rng: np.random.Generator, labels: np.ndarray, size: int) -> dict[str, np.ndarray]:
    """Per-image object parameters, in pixels: :data:`SLOTS` primitive slots per image.

    A primitive is a thick segment from ``a`` to ``b`` (relative to the object's reference point)
    with half-width ``hw``: a box with flat ends extended by ``ext`` along the segment, or, when
    ``round``, a capsule (a disc when ``a == b``). A glyph is the union of up to four bars (one
    texture for all of them); a relation object is a disc (slot 1) and a square (slot 0, a
    zero-length box).
    """
    m = len(labels)
    k = size / 32.0  # the design is in pixels at 32 px; everything scales with the image
    glyph = labels < NUM_GLYPHS
    u = rng.uniform

    # Glyphs: 14-19 px across (3.5-5 patches of 4 px), each axis jittered by +-10 %, bars 2.8-3.8 px thick.
    span = u(14.0, 19.0, m) * k
    half = span[:, None] * 0.5 * u(0.9, 1.1, (m, 2))  # (m, 2) half extents x, y
    glyph_hw = u(1.4, 1.9, m) * k
    # Relation objects: a disc 8.5-11.5 px across and a square 7.5-10.5 px wide, 1.5-3.5 px apart.
    disc_r = u(4.25, 5.75, m) * k
    square_h = u(3.75, 5.25, m) * k
    gap = u(1.5, 3.5, m) * k
    jitter = np.deg2rad(u(-8.0, 8.0, m))
    texture = rng.integers(0, 2, m)  # glyph texture: 0 stripes, 1 checker (not a class cue)

    # Glyph bars. The X's bars are cut square across their own axis, so its corners stick out by
    # ~0.7 half-widths; pulling its centreline in keeps the glyph inside its box.
    g = _GLYPHS[np.where(glyph, labels, 0)]  # (m, SLOTS, 4)
    inset = glyph_hw * np.where(labels == 5, 0.7, 1.0)
    centre_half = half - inset[:, None]  # (m, 2)
    ga = g[..., 0:2] * centre_half[:, None, :]  # (m, SLOTS, 2)
    gb = g[..., 2:4] * centre_half[:, None, :]
    g_active = ~np.isnan(g[..., 0])

    # Relation: square at the origin, disc in direction d (jittered) at a distance that clears the
    # square (support function of a square) by `gap`.
    d = _DIRECTIONS[np.where(glyph, 0, labels - NUM_GLYPHS)]  # (m, 2)
    cos, sin = np.cos(jitter), np.sin(jitter)
    d = np.stack([d[:, 0] * cos - d[:, 1] * sin, d[:, 0] * sin + d[:, 1] * cos], axis=1)
    dist = disc_r + square_h * (np.abs(d[:, 0]) + np.abs(d[:, 1])) + gap
    r_pts = np.zeros((m, SLOTS, 2))
    r_pts[:, 1] = d * dist[:, None]
    r_active = np.zeros((m, SLOTS), dtype=bool)
    r_active[:, :2] = True

    gl = glyph[:, None]
    a = np.where(gl[..., None], ga, r_pts)
    b = np.where(gl[..., None], gb, r_pts)
    a, b = np.nan_to_num(a), np.nan_to_num(b)
    active = np.where(gl, g_active, r_active)
    hw = np.where(gl, glyph_hw[:, None], np.stack([square_h, disc_r] + [square_h] * (SLOTS - 2), axis=1))
    is_x = (labels == 5)[:, None]
    ext = np.where(gl, np.where(is_x, 0.0, glyph_hw[:, None]), hw)  # flat ends; the square is all "end"
    ext[~gl[:, 0], 1] = 0.0
    round_ = np.zeros((m, SLOTS), dtype=bool)
    round_[:, 1] = ~glyph  # the disc
    # Texture per slot: the glyph's own draw; the square checkered, the disc striped.
    tex = np.where(gl, texture[:, None], np.array([1] + [0] * (SLOTS - 1)))
    # Shading (lit from the upper left) per slot: around the glyph's centre, or each part's own.
    shade_c = np.where(gl[..., None], 0.0, r_pts)
    shade_r = np.where(gl, half.max(axis=1)[:, None], hw)

    # Bounding box of the object around its reference point, from the corners of every primitive.
    seg = b - a
    length = np.linalg.norm(seg, axis=-1)
    dirn = np.where(length[..., None] > 1e-9, seg / np.maximum(length, 1e-9)[..., None], [1.0, 0.0])
    nrm = np.stack([-dirn[..., 1], dirn[..., 0]], axis=-1)
    corners = np.stack(
        [p + s * hw[..., None] * nrm for p in (a - ext[..., None] * dirn, b + ext[..., None] * dirn) for s in (-1, 1)],
        axis=2,
    )  # (m, SLOTS, 4, 2)
    disc_box = np.stack([a - hw[..., None], b + hw[..., None]], axis=2)  # capsules: endpoints +- hw
    corners = np.where(round_[..., None, None], np.concatenate([disc_box, disc_box], axis=2), corners)
    on = active[..., None, None]
    lo = np.where(on, corners, np.inf).min(axis=(1, 2))  # (m, 2)
    hi = np.where(on, corners, -np.inf).max(axis=(1, 2))

    # Place the object uniformly where it fits (1 px margin plus outline, and shadow down-right).
    lo = lo - _outline(size)
    hi = hi + _outline(size) + _shadow_offset(size)
    free_lo, free_hi = 1.0 - lo, size - 1.0 - hi
    free_hi = np.maximum(free_hi, free_lo)  # too big to fit: pin to the top-left margin
    origin = free_lo + u(0.0, 1.0, (m, 2)) * (free_hi - free_lo)

    colour = _hsv_to_rgb(u(0, 1, m), u(0.6, 1.0, m), u(0.7, 1.0, m))  # (m, 3): one colour per object
    return {
        "a": a + origin[:, None, :],  # (m, SLOTS, 2) x, y in pixels
        "b": b + origin[:, None, :],
        "hw": hw,  # (m, SLOTS) half-width
        "ext": ext,  # (m, SLOTS) flat-end extension
        "round": round_,  # (m, SLOTS)
        "active": active,  # (m, SLOTS)
        "texture": tex,  # (m, SLOTS) 0 stripes, 1 checker
        "shade_c": shade_c + origin[:, None, :],  # (m, SLOTS, 2)
        "shade_r": shade_r,  # (m, SLOTS)
        "box": np.stack([lo, hi], axis=1) + origin[:, None, :],  # (m, 2, 2): drawn extent incl. shadow
        "colour": colour,
        "contrast": u(0.25, 0.4, m),  # texture contrast
        "phase": rng.integers(0, 2, m),  # texture phase in stripes/cells
    }


def _render_chunk(rng: np.random.Generator, labels: np.ndarray, size: int) -> np.ndarray:
    """Render ``len(labels)`` scenes; returns uint8 ``(m, 3, S, S)``.

    Channel-first float32 throughout: per-pixel masks are ``(m, 1, S, S)`` and broadcast over
    contiguous channel planes. The object is drawn in small per-image windows around each part.
    """
    m = len(labels)
    # Every random number is drawn here, in a fixed order: that order *is* the dataset.
    background = _draw_background(rng, m, size)
    layout = _layout(rng, labels, size)
    grain_scale = rng.uniform(0.015, 0.035, m).astype(_F) * _F(np.sqrt(12.0) / 255.0)  # uniform noise, std 1.5-3.5 %
    grain = np.frombuffer(rng.bytes(m * 3 * size * size), dtype=np.uint8).reshape(m, 3, size, size)

    image = _render_background(background, size)  # (m, 3, S, S) in [0, 1]-ish
    _draw_object(image, layout, size)
    # To 0..255 with the grain folded in: image * 255 + (grain - 127.5) * scale * 255 + 0.5 (rounding).
    scale255 = (grain_scale * _F(255.0))[:, None, None, None]
    image *= _F(255.0)
    image += np.multiply(grain, scale255, dtype=_F)
    image += _F(0.5) - _F(127.5) * scale255
    return np.clip(image, 0, 255, out=image).astype(np.uint8)  # (m, 3, S, S)


def _draw_background(rng: np.random.Generator, m: int, size: int) -> dict[str, np.ndarray]:
    u = rng.uniform
    return {
        "horizon": u(0.42, 0.62, m),  # height of the horizon at the centre column, fraction of S
        "tilt": u(-0.15, 0.15, m),  # horizon slope
        "zenith": np.stack([u(0.05, 0.25, m), u(0.15, 0.4, m), u(0.45, 0.75, m)], 1),  # sky colour at the top
        "haze": np.stack([u(0.65, 0.85, m), u(0.72, 0.9, m), u(0.8, 0.98, m)], 1),  # sky at the horizon
        "sun_xy": np.stack([u(0.08, 0.35, m), u(0.06, 0.24, m)], 1) * size,  # upper left, mirrored if sun_right
        "sun_r": u(0.045, 0.07, m) * size,
        "glow": u(0.15, 0.35, m),
        "ground": np.stack([u(0.25, 0.55, m), u(0.3, 0.55, m), u(0.08, 0.25, m)], 1),
        "furrow_freq": u(0.3, 0.45, m),
        "furrow_phase": u(0.0, 2 * np.pi, m),
        "light": u(0.2, 0.4, m),  # brightness falloff away from the sun's side
        "banding": u(0.05, 0.1, m),  # 1 px sky banding, strongest at the horizon
        # v3: the sun's side is random, so coarse lighting says nothing about left/right; the only
        # horizontal cue in the background is a fine chirp whose period shrinks from left to right.
        "sun_right": rng.integers(0, 2, m).astype(bool),
        "chirp_amp": u(0.08, 0.14, m),
        "chirp_phase": u(0.0, 2 * np.pi, m),
    }


def _col(a: np.ndarray) -> np.ndarray:  # (m,) -> (m, 1, 1, 1)
    return np.asarray(a, dtype=_F)[:, None, None, None]


def _rgb(a: np.ndarray) -> np.ndarray:  # (m, 3) -> (m, 3, 1, 1)
    return np.asarray(a, dtype=_F)[:, :, None, None]


def _blend(image: np.ndarray, colour: np.ndarray, alpha: np.ndarray) -> None:
    """In-place "over" composite of ``colour`` with coverage ``alpha``."""
    image += (colour - image) * alpha


def _render_background(bg: dict[str, np.ndarray], size: int) -> np.ndarray:
    px = np.arange(size, dtype=_F) + 0.5  # pixel centres
    X, Y = px[None, None, None, :], px[None, None, :, None]  # (1, 1, 1, S), (1, 1, S, 1)
    u, v = X / size, Y / size
    horizon = _col(bg["horizon"]) + _col(bg["tilt"]) * (u - 0.5)  # (m, 1, 1, S)
    zenith, haze = _rgb(bg["zenith"]), _rgb(bg["haze"])

    t_sky = np.minimum(v / horizon, 1.0)  # (m, 1, S, S): 0 at the top, 1 at the horizon
    image = zenith + (haze - zenith) * (t_sky * (2.0 - t_sky))  # (m, 3, S, S)

    sun_x = np.where(bg["sun_right"], size - bg["sun_xy"][:, 0], bg["sun_xy"][:, 0])
    sun_d2 = (X - _col(sun_x)) ** 2 + (Y - _col(bg["sun_xy"][:, 1])) ** 2  # (m, 1, S, S)
    glow = _col(bg["glow"]) * np.exp(sun_d2 * _F(-1.0 / (0.3 * size) ** 2))
    image += glow * np.array([1.0, 0.8, 0.5], dtype=_F)[None, :, None, None]
    sun = np.clip(_col(bg["sun_r"]) - np.sqrt(sun_d2) + 0.5, 0.0, 1.0)
    _blend(image, np.array([1.0, 0.97, 0.8], dtype=_F)[None, :, None, None], sun)

    depth = np.clip((v - horizon) / (1.0 - horizon), 0.0, 1.0)  # (m, 1, S, S): 0 at the horizon, 1 at the bottom
    # Furrows whose spacing shrinks towards the horizon (perspective): a texture that encodes the row.
    furrows = np.sin(_F(2 * np.pi) * _col(bg["furrow_freq"]) / (depth + _F(0.12)) + _col(bg["furrow_phase"]))
    ground = haze + (_rgb(bg["ground"]) - haze) * np.minimum(depth * 4.0, 1.0)  # (m, 3, S, S): hazy far away
    ground *= (1.05 - 0.45 * depth) * (1.0 + 0.08 * furrows)
    _blend(image, ground, np.clip(Y - horizon * size + 0.5, 0.0, 1.0))  # soft 1 px horizon
    side = np.where(bg["sun_right"], -1.0, 1.0)
    image *= 1.0 + _col(bg["light"] * side) * (0.5 - u)  # brighter towards the sun
    # A fine vertical chirp: period 1/CHIRP_CYCLES[0] px at the left edge, 1/CHIRP_CYCLES[1] px at the
    # right. The local stripe period tells a patch how far right it is; JPEG and blur erase it.
    f0, f1 = CHIRP_CYCLES
    chirp = _F(2 * np.pi) * (f0 * X + (f1 - f0) * X**2 / (2 * size)) + _col(bg["chirp_phase"])  # (m, 1, 1, S)
    image *= 1.0 + _col(bg["chirp_amp"]) * np.sin(chirp)
    rows_sign = (np.arange(size) % 2 * 2 - 1).astype(_F)[None, None, :, None]  # (1, 1, S, 1) +-1 by row
    image *= 1.0 + _col(bg["banding"]) * t_sky * (1.0 - depth) * rows_sign
    return image


def _draw_object(image: np.ndarray, lay: dict[str, np.ndarray], size: int) -> None:
    """Draw the object into ``image`` in place: its shadow (down-right, away from the sun), then the
    outlined, textured, shaded object. Each image's object is rendered in a ``win x win`` window."""
    m = image.shape[0]
    k = size / 32.0
    outline, shadow_offset = _outline(size), _shadow_offset(size)
    period = max(1, round(k))  # texture cell in pixels: fine at every size
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

    sdf = _union_sdf(px - shadow_offset, py - shadow_offset, lay)
    patch *= 1.0 - 0.35 * np.clip(0.5 - sdf, 0.0, 1.0)

    sdf, slot = _union_sdf(px, py, lay, with_slot=True)  # (m, 1, W, W), < 0 inside

    def pick(v: np.ndarray) -> np.ndarray:  # (m, SLOTS) -> (m, 1, W, W): the value of each pixel's slot
        return np.take_along_axis(np.asarray(v, dtype=_F)[:, :, None, None], slot, axis=1)

    stripes = (rows // period % 2).astype(_F)  # horizontal stripes, in image coordinates
    checker = ((rows // period + cols // period) % 2).astype(_F)
    pattern = np.where(pick(lay["texture"]) > 0.5, checker, stripes)
    phase = _col(lay["phase"])
    tex = pattern + phase - 2.0 * pattern * phase  # pattern XOR phase
    c = _col(lay["contrast"])
    r = pick(lay["shade_r"])
    lit = (px - pick(lay["shade_c"][..., 0])) + (py - pick(lay["shade_c"][..., 1]))
    shade = 1.0 + 0.22 * np.clip(lit * (-1.0 / (1.4 * r)), -1.0, 1.0)  # lit from the upper left
    ring = np.clip(0.5 + outline - sdf, 0.0, 1.0)  # outline and body
    body = np.clip(0.5 - sdf, 0.0, 1.0)
    colour = _rgb(lay["colour"])
    dark = colour * _F(0.2)
    # The outline is at least 1 px wide, so ring == 1 wherever body > 0 and one composite draws
    # both: outline colour outside the body, textured colour inside.
    target = dark + (colour * ((1.0 - c + c * tex) * shade) - dark) * body
    _blend(patch, target, ring)
    windows[everyone, :, y0, x0] = patch


def _union_sdf(
    px: np.ndarray, py: np.ndarray, lay: dict[str, np.ndarray], with_slot: bool = False
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Signed distance (pixels, < 0 inside) to the union of an image's active primitives, at pixel
    centres ``px (m, 1, 1, W)``, ``py (m, 1, W, 1)``; with ``with_slot`` also the nearest slot."""
    best = slot = None
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
        if lay["round"][:, j].any():  # capsule: distance to the segment
            t = np.clip(along, 0.0, _col(length))
            capsule = np.sqrt((along - t) ** 2 + across**2) - hw
        else:
            capsule = None
        boxed = np.maximum(np.abs(along - half) - half - _col(lay["ext"][:, j]), np.abs(across) - hw)
        s = boxed if capsule is None else np.where(_col(lay["round"][:, j]) > 0.5, capsule, boxed)
        s = np.where(_col(lay["active"][:, j]) > 0.5, s, _F(np.inf))
        if best is None:
            best, slot = s, np.zeros(s.shape, dtype=np.int64)
        else:
            closer = s < best
            best = np.where(closer, s, best)
            if with_slot:
                slot = np.where(closer, j, slot)
    return (best, slot) if with_slot else best


def generate_scenes(
    n: int, *, img_size: int = 32, seed: int = 0, split: str = "train"
) -> tuple[np.ndarray, np.ndarray]:
    """Render a split: uint8 images ``(n, 3, S, S)`` and int64 labels ``(n,)``, without caching.

    Labels are balanced within every chunk of :data:`CHUNK` images (exactly balanced when ``n`` is
    a multiple of 10 within each chunk).
    """
    if split not in SPLITS:
        raise DataError(f"scenes split {split!r}: expected one of {', '.join(SPLITS)}")
    images = np.empty((n, 3, img_size, img_size), dtype=np.uint8)
    labels = np.empty(n, dtype=np.int64)
    for c, start in enumerate(range(0, n, CHUNK)):
        m = min(CHUNK, n - start)
        rng = np.random.default_rng([GENERATOR_VERSION, seed, SPLITS[split], img_size, c])
        chunk_labels = rng.permutation(np.arange(m) % len(SCENES_CLASSES))
        images[start : start + m] = _render_chunk(rng, chunk_labels, img_size)
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
