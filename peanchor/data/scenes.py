"""``scenes``: the embedded default dataset, generated procedurally (no download, seconds to build).

Every image is a small outdoor scene with a consistent global layout (sky above, ground below a
tilted horizon, sun and light from the left) and one object made of a *striped disc* and a
*checkered square*. The class is the spatial relation between the parts (disc above / below / left
of / ... the square; disc-square-disc in a row or in a column), so every class is made of the same
kinds of patches and a bag of patches cannot tell them apart: the model has to know where its
patches are. The layout gives a model without positional encoding a content-driven cue ("ghost
map") of where a patch is; fine textures and grain make that cue, and the parts' identity, fragile
to JPEG and blur. See docs/scenes.md.

Generation is vectorised numpy over chunks of :data:`CHUNK` images. Chunk ``c`` of a split draws
everything from ``default_rng([GENERATOR_VERSION, seed, split, S, c])``, so a split is a pure
function of its parameters (independent of batch size, workers or call order), and the first full
chunks of a split do not change when ``n`` grows. Splits are cached as ``.npy`` files and
memory-mapped on load.
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

GENERATOR_VERSION = 1
CHUNK = 100
SPLITS = {"train": 0, "val": 1}
DEFAULT_SIZES = {"train": 20000, "val": 2000}

# Where the striped disc sits relative to the checkered square. Left/right are distinct classes,
# so scenes are not flip-invariant and are never flipped in training.
SCENES_CLASSES: tuple[str, ...] = (
    "disc_above",
    "disc_below",
    "disc_left",
    "disc_right",
    "disc_upper_left",
    "disc_upper_right",
    "disc_lower_left",
    "disc_lower_right",
    "row",  # disc - square - disc, horizontal
    "column",  # disc - square - disc, vertical
)

# Unit offsets (x right, y down) of the disc from the square for the eight two-part classes.
_S2 = np.sqrt(0.5)
_DIRECTIONS = np.array(
    [[0, -1], [0, 1], [-1, 0], [1, 0], [-_S2, -_S2], [_S2, -_S2], [-_S2, _S2], [_S2, _S2]], dtype=np.float64
)

_F = np.float32


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
    """Per-image object parameters: 3 part slots (0: square, 1-2: discs), in pixels."""
    m = len(labels)
    k = size / 32.0  # the design is in pixels at 32 px; everything scales with the image
    two = labels < 8
    # Three-part compositions are drawn 15 % smaller so they fit; that only separates them from
    # the two-part classes, which their part count does anyway.
    scale = np.where(two, 1.0, 0.72) * k
    disc_r = rng.uniform(3.4, 4.6, m) * scale
    square_h = rng.uniform(3.0, 4.2, m) * scale  # half side
    # Gap between the bodies: with the 1 px outlines, rarely does one 4 px patch hold texture of both parts.
    gap = rng.uniform(1.5, 3.5, m) * scale
    jitter = np.deg2rad(rng.uniform(-8.0, 8.0, m))

    d = _DIRECTIONS[np.where(two, labels, 0)]  # (m, 2)
    cos, sin = np.cos(jitter), np.sin(jitter)
    d = np.stack([d[:, 0] * cos - d[:, 1] * sin, d[:, 0] * sin + d[:, 1] * cos], axis=1)
    # Centre distance so that the disc clears the square (support function of a square) by `gap`.
    dist2 = disc_r + square_h * (np.abs(d[:, 0]) + np.abs(d[:, 1])) + gap
    dist3 = disc_r + square_h + gap
    horiz = labels == 8

    centres = np.zeros((m, 3, 2))  # relative to the square's centre
    centres[:, 1] = np.where(
        two[:, None], d * dist2[:, None], np.where(horiz[:, None], [-1.0, 0.0], [0.0, -1.0]) * dist3[:, None]
    )
    centres[:, 2] = np.where(horiz[:, None], [1.0, 0.0], [0.0, 1.0]) * dist3[:, None]
    active = np.ones((m, 3), dtype=bool)
    active[:, 2] = ~two
    sizes = np.stack([square_h, disc_r, disc_r], axis=1)  # (m, 3)

    # Place the whole composition uniformly where it fits (1 px margin plus outline and shadow).
    reach = sizes + _outline(size)
    lo = np.where(active[..., None], centres - reach[..., None], np.inf).min(axis=1)  # (m, 2)
    hi = np.where(active[..., None], centres + reach[..., None] + _shadow_offset(size), -np.inf).max(axis=1)
    free_lo, free_hi = 1.0 - lo, size - 1.0 - hi
    free_hi = np.maximum(free_hi, free_lo)  # too big to fit: pin to the top-left margin
    origin = free_lo + rng.uniform(0.0, 1.0, (m, 2)) * (free_hi - free_lo)
    centres = centres + origin[:, None, :]

    colours = _hsv_to_rgb(rng.uniform(0, 1, (m, 2)), rng.uniform(0.55, 1.0, (m, 2)), rng.uniform(0.6, 1.0, (m, 2)))
    return {
        "centres": centres,  # (m, 3, 2) x, y in pixels
        "sizes": sizes,  # (m, 3) square half side / disc radius
        "is_disc": np.array([False, True, True]),
        "active": active,  # (m, 3)
        "colours": colours[:, [0, 0, 0]],  # (m, 3, 3): one colour for the whole object
        "contrast": rng.uniform(0.45, 0.7, (m, 2))[:, [0, 1, 1]],  # texture contrast per slot
        "phase": rng.integers(0, 2, (m, 3)),  # texture phase in stripes/cells
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
        "sun_xy": np.stack([u(0.08, 0.35, m), u(0.06, 0.24, m)], 1) * size,  # always in the upper left
        "sun_r": u(0.045, 0.07, m) * size,
        "glow": u(0.15, 0.35, m),
        "ground": np.stack([u(0.25, 0.55, m), u(0.3, 0.55, m), u(0.08, 0.25, m)], 1),
        "furrow_freq": u(0.3, 0.45, m),
        "furrow_phase": u(0.0, 2 * np.pi, m),
        "light": u(0.2, 0.4, m),  # left-to-right brightness falloff over the image
        "banding": u(0.05, 0.1, m),  # 1 px sky banding, strongest at the horizon
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

    sun_d2 = (X - _col(bg["sun_xy"][:, 0])) ** 2 + (Y - _col(bg["sun_xy"][:, 1])) ** 2  # (m, 1, S, S)
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
    image *= 1.0 + _col(bg["light"]) * (0.5 - u)  # brighter towards the sun (left)
    rows_sign = (np.arange(size) % 2 * 2 - 1).astype(_F)[None, None, :, None]  # (1, 1, S, 1) +-1 by row
    image *= 1.0 + _col(bg["banding"]) * t_sky * (1.0 - depth) * rows_sign
    return image


def _draw_object(image: np.ndarray, lay: dict[str, np.ndarray], size: int) -> None:
    """Draw the parts into ``image`` in place: all shadows (down-right, away from the sun), then the
    outlined, textured, shaded parts. Each part is rendered in a ``win x win`` window of its own."""
    m = image.shape[0]
    k = size / 32.0
    outline, shadow_offset = _outline(size), _shadow_offset(size)
    period = max(1, round(k))  # texture cell in pixels: fine at every size
    reach = lay["sizes"] + outline + 1.0  # (m, 3): centre to the outer edge of the outline, plus slack
    win = min(size, int(np.ceil(2 * reach.max() + shadow_offset)) + 2)
    steps = np.arange(win)
    everyone = np.arange(m)
    # windows[i, :, y, x] is the (3, win, win) view of image i at top-left (y, x): gathering and
    # scattering through it copies contiguous rows, far cheaper than 4-array fancy indexing.
    windows = np.lib.stride_tricks.sliding_window_view(image, (win, win), axis=(2, 3), writeable=True)

    def origin(j: int) -> tuple[np.ndarray, np.ndarray]:  # top-left pixel (y0, x0) of part j's window, (m,)
        x0 = np.clip(np.floor(lay["centres"][:, j, 0] - reach[:, j]).astype(np.int64), 0, size - win)
        y0 = np.clip(np.floor(lay["centres"][:, j, 1] - reach[:, j]).astype(np.int64), 0, size - win)
        return y0, x0

    for shadows in (True, False):
        for j in range(3):
            y0, x0 = origin(j)
            rows, cols = (y0[:, None] + steps)[:, None, :, None], (x0[:, None] + steps)[:, None, None, :]
            patch = windows[everyone, :, y0, x0]  # (m, 3, W, W), a copy
            dx = cols + _F(0.5) - _col(lay["centres"][:, j, 0])  # (m, 1, 1, W)
            dy = rows + _F(0.5) - _col(lay["centres"][:, j, 1])  # (m, 1, W, 1)
            r, active = _col(lay["sizes"][:, j]), _col(lay["active"][:, j])
            if shadows:
                sdf = _sdf(dx - shadow_offset, dy - shadow_offset, r, lay["is_disc"][j])
                patch *= 1.0 - 0.35 * np.clip(0.5 - sdf, 0.0, 1.0) * active
            else:
                sdf = _sdf(dx, dy, r, lay["is_disc"][j])  # (m, 1, W, W), < 0 inside
                ring = np.clip(0.5 + outline - sdf, 0.0, 1.0) * active  # outline and body
                body = np.clip(0.5 - sdf, 0.0, 1.0)
                if lay["is_disc"][j]:  # horizontal stripes, in image coordinates
                    pattern = (rows // period % 2).astype(_F)
                else:  # checkerboard
                    pattern = ((rows // period + cols // period) % 2).astype(_F)
                phase = _col(lay["phase"][:, j])
                tex = pattern + phase - 2.0 * pattern * phase  # pattern XOR phase
                c = _col(lay["contrast"][:, j])
                shade = 1.0 + 0.22 * np.clip((dx + dy) * (-1.0 / (1.4 * r)), -1.0, 1.0)  # lit from the upper left
                colour = _rgb(lay["colours"][:, j])
                dark = colour * _F(0.2)
                # The outline is at least 1 px wide, so ring == 1 wherever body > 0 and one
                # composite draws both: outline colour outside the body, textured colour inside.
                target = dark + (colour * ((1.0 - c + c * tex) * shade) - dark) * body
                _blend(patch, target, ring)
            windows[everyone, :, y0, x0] = patch


def _sdf(dx: np.ndarray, dy: np.ndarray, r: np.ndarray, is_disc: bool) -> np.ndarray:
    """Signed distance (pixels) to a disc of radius r or a square of half side r."""
    if is_disc:
        return np.sqrt(dx * dx + dy * dy) - r
    return np.maximum(np.abs(dx), np.abs(dy)) - r


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
