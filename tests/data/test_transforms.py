"""peanchor.data.transforms: every augmentation policy against its definition on many seeded draws, per item and
batched, in the training loop too, and the default policy per dataset."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import v2

import peanchor.data as data
from peanchor.data import DataSpec, build_datasets
from peanchor.data.transforms import batch_augment
from peanchor.core.errors import ConfigError

pytestmark = pytest.mark.usefixtures("private_cache")


# ------------------------------------------------------------------------------------------------
# transforms and normalisation


def test_policy_none_is_the_eval_transform():
    x = torch.randint(0, 256, (6, 3, 16, 16), dtype=torch.uint8)
    assert batch_augment(x, "none") is x
    assert isinstance(data.train_transform("none", 16), v2.Resize)
    with pytest.raises(ConfigError, match="rrc_flip"):
        batch_augment(x, "bogus")
    with pytest.raises(ConfigError, match="rrc_flip"):
        data.train_transform("bogus", 16)


# Every augmentation is checked against its definition on many seeded draws, through both paths: the
# per-item v2 pipeline (`train_transform`, image files) and the batched one (`batch_augment`, arrays and
# the training loop's device batches). A statistical check fails a correct augmentation with
# probability ALPHA; the seeds are fixed, so a pass is a pass every time.
ALPHA = 1e-3
DRAWS = 2000


def _augment_batch(policy: str, image: torch.Tensor, n: int, seed: int = 0) -> torch.Tensor:
    """``n`` draws of ``policy`` on ``image`` (3, S, S) through :func:`batch_augment`, in batches of 500."""
    g = torch.Generator().manual_seed(seed)
    batch = image.expand(min(n, 500), -1, -1, -1).contiguous()  # (b, 3, S, S)
    return torch.cat([batch_augment(batch[: min(500, n - i)], policy, generator=g) for i in range(0, n, 500)])


def _augment_items(policy: str, image: torch.Tensor, n: int, seed: int = 0, size: int | None = None) -> torch.Tensor:
    """``n`` draws of ``policy`` on ``image`` through the per-item pipeline :func:`train_transform` at ``size``."""
    transform = data.train_transform(policy, size or image.shape[-1])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return torch.stack([transform(image) for _ in range(n)])  # (n, 3, S, S)


AUGMENT_PATHS = {"batch": _augment_batch, "item": _augment_items}


def _shift_table(image: torch.Tensor, pad: int, *, edge: bool, flip: bool) -> dict[bytes, tuple[int, int, bool]]:
    """Every output of RandomCrop(S, padding=pad) (+ a horizontal flip) on ``image`` (3, S, S), written out:
    its bytes → (row offset, column offset, flipped)."""
    s = image.shape[-1]
    mode = "replicate" if edge else "constant"
    padded = torch.nn.functional.pad(image[None].float(), (pad,) * 4, mode=mode)[0].to(torch.uint8)  # (3, S+2p, S+2p)
    table = {}
    for dy in range(2 * pad + 1):
        for dx in range(2 * pad + 1):
            crop = padded[:, dy : dy + s, dx : dx + s]
            for flipped in (False, True) if flip else (False,):
                table[(crop.flip(-1) if flipped else crop).contiguous().numpy().tobytes()] = (dy, dx, flipped)
    assert len(table) == (2 * pad + 1) ** 2 * (1 + flip), "two candidate crops coincide: use a less regular image"
    return table


def _identify(outputs: torch.Tensor, table: dict[bytes, tuple[int, int, bool]]) -> list[tuple[int, int, bool]]:
    keys = [o.contiguous().numpy().tobytes() for o in outputs]
    missing = sum(k not in table for k in keys)
    assert missing == 0, f"{missing} of {len(keys)} outputs are no crop (+ flip) of the input"
    return [table[k] for k in keys]


def _assert_uniform(draws: list, cells: list) -> None:
    from collections import Counter

    from scipy.stats import chisquare

    counts = Counter(draws)
    observed = [counts[c] for c in cells]
    assert sum(observed) == len(draws), f"draws outside the {len(cells)} cells: {set(counts) - set(cells)}"
    p = chisquare(observed).pvalue
    assert p > ALPHA, f"not uniform over the {len(cells)} cells: chi-square p = {p:.2g}, counts {observed}"


def _assert_fair_flips(flipped: np.ndarray) -> None:
    from scipy.stats import binom

    n, k = len(flipped), int(np.sum(flipped))
    low, high = binom.interval(1 - ALPHA, n, 0.5)
    assert low <= k <= high, f"{k} of {n} flipped, outside the binomial {1 - ALPHA} interval [{low:.0f}, {high:.0f}]"


@pytest.mark.parametrize("path", sorted(AUGMENT_PATHS))
@pytest.mark.parametrize("policy", ["flip", "translate", "crop_flip"])
def test_shift_and_flip_policies_draw_every_crop_and_flip_uniformly(policy, path):
    """flip: the image or its mirror, half and half. translate: RandomCrop(S, padding=S/16, edge padding), never
    flipped. crop_flip: RandomCrop(S, padding=S/8, zeros) and a fair flip. Each output is identified exactly among
    the policy's possible outputs, and the draws are uniform over them."""
    s = 16
    image = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (3, s, s), dtype=np.uint8))
    pad = {"flip": 0, "translate": data.transforms.translate_padding(s), "crop_flip": data.transforms.crop_padding(s)}
    table = _shift_table(image, pad[policy], edge=policy == "translate", flip=policy != "translate")
    draws = _identify(AUGMENT_PATHS[path](policy, image, DRAWS), table)
    if pad[policy]:
        offsets = range(2 * pad[policy] + 1)
        _assert_uniform([(dy, dx) for dy, dx, _ in draws], [(dy, dx) for dy in offsets for dx in offsets])
    if policy != "translate":
        _assert_fair_flips(np.array([f for *_, f in draws]))


def test_scenes_train_split_is_translated_by_up_to_s_over_16_and_never_flipped(tmp_path):
    """The scenes train split augments as it is read (`fetch`), with its default policy."""
    train, _, _ = build_datasets(DataSpec(train_size=20, val_size=10, cache_dir=str(tmp_path)))
    assert train.policy == "translate"
    raw = torch.from_numpy(np.array(train.images[:20]))  # (20, 3, 32, 32)
    pad = data.transforms.translate_padding(32)
    tables = [_shift_table(x, pad, edge=True, flip=False) for x in raw]
    draws = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        for _ in range(30):
            shifted, labels = train.fetch(range(20))
            assert labels.tolist() == train.labels[:20].tolist()
            draws += [_identify(out[None], table)[0][:2] for out, table in zip(shifted, tables)]
    offsets = range(2 * pad + 1)
    _assert_uniform(draws, [(dy, dx) for dy in offsets for dx in offsets])


def test_training_steps_see_their_images_translated_afresh_at_every_step(tmp_path, monkeypatch):
    """The training loop augments each device batch (the smoke preset: scenes, translate): what the model is fed
    is every image of the epoch, each shifted by a fresh uniform draw."""
    from peanchor.presets.catalog import resolve_config
    from peanchor.training import step as training_step
    from peanchor.training.loop import train

    fed = []
    normalize = training_step.normalize

    def recording(images, mean, std):  # what TrainingForward feeds the model, before normalisation
        fed.append(images.clone())
        return normalize(images, mean, std)

    monkeypatch.setattr(training_step, "normalize", recording)
    sets = ["data.train_size=64", "data.val_size=10", "train.batch_size=32", "train.epochs=4"]
    config = resolve_config("smoke", {}, [f"data.cache_dir={tmp_path / 'cache'}", *sets])
    train(config, tmp_path / "run", progress=False)
    raw = torch.from_numpy(np.array(build_datasets(config.data)[0].images))  # (64, 3, 16, 16) as stored
    pad = data.transforms.translate_padding(config.data.img_size)
    table = {}
    for i, image in enumerate(raw):
        table.update({k: (i, dy, dx) for k, (dy, dx, _) in _shift_table(image, pad, edge=True, flip=False).items()})
    assert len(table) == len(raw) * (2 * pad + 1) ** 2, "two images have a shift in common"
    assert len(fed) == 4 * 2
    draws = _identify(torch.cat(fed), table)
    for epoch in range(4):  # every image once per epoch
        assert sorted(i for i, _, _ in draws[epoch * 64 : (epoch + 1) * 64]) == list(range(64))
    offsets = range(2 * pad + 1)
    _assert_uniform([(dy, dx) for _, dy, dx in draws], [(dy, dx) for dy in offsets for dx in offsets])


def _ramp_image(size: int, step: int) -> torch.Tensor:
    """uint8 (3, S, S): channel 0 is ``step`` × the column, channel 1 ``step`` × the row. Bilinear and antialiased
    resampling keep a linear ramp linear away from the borders, so a crop's size, place and flip can be read back."""
    ramp = torch.arange(size) * step
    assert ramp.max() <= 255
    return torch.stack([ramp.expand(size, size), ramp[:, None].expand(size, size), torch.zeros(size, size)]).to(
        torch.uint8
    )


def _crop_geometry(out: torch.Tensor, step: int, in_size: int, margin: int = 3) -> dict[str, np.ndarray]:
    """The crops behind ``out`` (n, 3, S, S) of :func:`_ramp_image` (in_size, step), fitted on interior pixels:
    width and height (fractions of the input side), the crop's place along its free range (0: left/top edge,
    1: right/bottom edge) and whether it was flipped."""
    s = out.shape[-1]
    k = torch.arange(margin, s - margin, dtype=torch.float64)  # output pixel centres used in the fit
    design = torch.stack([torch.ones_like(k), k - (s - 1) / 2], 1)  # (K, 2): intercept at the centre, slope
    cols = out[:, 0, :, margin : s - margin].double().mean(1)  # (n, K) the column ramp (constant along rows)
    rows = out[:, 1, margin : s - margin, :].double().mean(2)  # (n, K) the row ramp
    fx = torch.linalg.lstsq(design, cols.T).solution.numpy() / step  # (2, n) input px: centre column, px per out px
    fy = torch.linalg.lstsq(design, rows.T).solution.numpy() / step
    assert (fy[1] > 0).all(), "an image was flipped vertically"
    width, height = np.abs(fx[1]) * s / in_size, fy[1] * s / in_size
    centre_x, centre_y = (fx[0] + 0.5) / in_size, (fy[0] + 0.5) / in_size
    with np.errstate(divide="ignore", invalid="ignore"):
        place_x, place_y = (centre_x - width / 2) / (1 - width), (centre_y - height / 2) / (1 - height)
    return {"width": width, "height": height, "place_x": place_x, "place_y": place_y, "flipped": fx[1] < 0}


def _rrc_reference_cdfs(scale: tuple[float, float], ratio: tuple[float, float]):
    """RandomResizedCrop on a square image, written out: the area a ~ U(scale), the log aspect ratio ρ ~
    U(log ratio), drawn again until the crop fits (√(a e^ρ) ≤ 1 and √(a / e^ρ) ≤ 1, i.e. |ρ| ≤ -log a). The kept
    pairs are uniform on that region, so a's density is the length of its ρ interval and vice versa.
    Returns the CDFs of the area and of the log ratio."""
    from scipy.integrate import cumulative_trapezoid

    lo, hi = np.log(ratio[0]), np.log(ratio[1])
    a = np.linspace(*scale, 20001)
    rho = np.linspace(lo, hi, 20001)
    dens_a = np.clip(np.minimum(hi, -np.log(a)) - np.maximum(lo, np.log(a)), 0, None)
    dens_rho = np.clip(np.minimum(scale[1], np.exp(-np.abs(rho))) - scale[0], 0, None)

    def cdf(x: np.ndarray, density: np.ndarray):
        c = cumulative_trapezoid(density, x, initial=0)
        return lambda v: np.interp(v, x, c / c[-1])

    return cdf(a, dens_a), cdf(rho, dens_rho)


# per-item: a 256 px image cropped and resized to 32 px (antialiased); batch: 64 px images, resampled in place
RRC_SETUPS = {"item": (256, 1, 32), "batch": (64, 4, 64)}  # input size, ramp step, output size


@pytest.mark.parametrize("path", sorted(AUGMENT_PATHS))
def test_random_resized_crop_draws_area_ratio_place_and_flip_as_configured(path):
    from scipy.stats import kstest

    in_size, step, out_size = RRC_SETUPS[path]
    image = _ramp_image(in_size, step)
    if path == "item":
        out = _augment_items("rrc_flip", image, DRAWS, size=out_size)
    else:
        out = _augment_batch("rrc_flip", image, DRAWS)
    g = _crop_geometry(out, step, in_size)
    area, log_ratio = g["width"] * g["height"], np.log(g["width"] / g["height"])
    scale, ratio = data.transforms.RRC_SCALE, data.transforms.RRC_RATIO
    slack = 0.02  # the per-item crop is whole pixels of a 256 px image
    assert scale[0] - slack <= area.min() and area.max() <= scale[1] + slack, (area.min(), area.max())
    assert np.log(ratio[0]) - slack <= log_ratio.min() and log_ratio.max() <= np.log(ratio[1]) + slack
    assert (g["width"] <= 1 + slack).all() and (g["height"] <= 1 + slack).all()
    area_cdf, log_ratio_cdf = _rrc_reference_cdfs(scale, ratio)
    for name, values, cdf in (("area", area, area_cdf), ("log ratio", log_ratio, log_ratio_cdf)):
        p = kstest(values, cdf).pvalue
        assert p > ALPHA, f"the crops' {name} does not follow RandomResizedCrop's: KS p = {p:.2g}"
    for axis in ("x", "y"):  # the crop's place is uniform over where it fits
        free = (g["width"] if axis == "x" else g["height"]) < 0.95
        p = kstest(np.clip(g[f"place_{axis}"][free], 0, 1), "uniform").pvalue
        assert p > ALPHA, f"the crops' {axis} place is not uniform: KS p = {p:.2g}"
    _assert_fair_flips(g["flipped"])


def test_image_files_are_cropped_and_flipped_per_item_in_the_train_split_only(tmp_path):
    """An image folder's train split applies the per-item rrc_flip to every read; its val split is the plain resize."""
    from scipy.stats import kstest

    in_size, step, out_size = RRC_SETUPS["item"]
    for split in ("train", "val"):
        (tmp_path / split / "ramp").mkdir(parents=True)
        Image.fromarray(_ramp_image(in_size, step).permute(1, 2, 0).numpy()).save(tmp_path / split / "ramp" / "0.png")
    spec = DataSpec(name="imagefolder", root=str(tmp_path), img_size=out_size, augment="rrc_flip")
    train, val, _ = build_datasets(spec)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        g = _crop_geometry(torch.stack([train[0][0] for _ in range(500)]), step, in_size)
    p = kstest(g["width"] * g["height"], _rrc_reference_cdfs(data.transforms.RRC_SCALE, data.transforms.RRC_RATIO)[0])
    assert p.pvalue > ALPHA, f"the train split's crops do not follow RandomResizedCrop's area: KS p = {p.pvalue:.2g}"
    _assert_fair_flips(g["flipped"])
    plain = _crop_geometry(torch.stack([val[0][0] for _ in range(3)]), step, in_size)
    assert np.allclose(plain["width"], 1, atol=0.01) and np.allclose(plain["height"], 1, atol=0.01)
    assert not plain["flipped"].any()


@pytest.mark.parametrize("path", sorted(AUGMENT_PATHS))
def test_random_resized_crop_falls_back_to_the_centre_crop_of_the_nearest_ratio(path, monkeypatch):
    """When no (area, ratio) draw fits, RandomResizedCrop takes the whole image, cut to the nearest allowed ratio,
    in the centre: here ratio 2 (twice as wide as high) from a square image."""
    monkeypatch.setattr(data.transforms, "RRC_SCALE", (0.9, 1.0))
    monkeypatch.setattr(data.transforms, "RRC_RATIO", (2.0, 3.0))
    in_size, step, out_size = RRC_SETUPS[path]
    image = _ramp_image(in_size, step)
    if path == "item":
        out = _augment_items("rrc_flip", image, 200, size=out_size)
    else:
        out = _augment_batch("rrc_flip", image, 200)
    g = _crop_geometry(out, step, in_size)
    assert np.allclose(g["width"], 1, atol=0.01) and np.allclose(g["height"], 0.5, atol=0.01)
    assert np.allclose(g["place_y"], 0.5, atol=0.02)
    _assert_fair_flips(g["flipped"])


def test_resolve_augment_defaults():
    assert data.resolve_augment("scenes", "auto", 32) == "translate"
    assert data.resolve_augment("cifar10", "auto", 32) == "crop_flip"
    assert data.resolve_augment("imagenet100", "auto", 224) == "rrc_flip"
    assert data.resolve_augment("imagefolder", "auto", 224) == "rrc_flip"
    assert data.resolve_augment("imagefolder", "auto", 32) == "crop_flip"
    assert data.resolve_augment("scenes", "none", 32) == "none"
