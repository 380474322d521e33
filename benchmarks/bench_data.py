"""Images per second: decoding an ImageFolder of JPEGs vs reading the prepared uint8 memmap.

    python3 benchmarks/bench_data.py            # 2000 JPEGs at 256x256 -> 224 px
    python3 benchmarks/bench_data.py --quick    # 300 JPEGs, 1 rep

A temporary ImageFolder is generated (``val/<class>/*.jpg``, smooth random scenes plus noise,
JPEG quality 90, 64 distinct images cycled over the files, and a one-image-per-class ``train``
split because a folder dataset needs both).
Candidates, each a full shuffled pass over the val split through a ``DataLoader`` (batch 64):

* ``folder_wN``: peanchor's ``imagefolder`` loader: decode + ``Resize((224, 224))`` per image,
  ``num_workers`` N in {0, 2} (worker start-up is included, as at every epoch);
* ``prepared_wN``: the same split after ``peanchor.data.prepare_dataset`` (decoded once into a
  uint8 ``.npy`` memmap at 224 px), read through its array loader (one fancy-index read per batch).

The prepared file was just written, so it is in the page cache: this is the steady state of a
second epoch, not a cold disk read. The one-off preparation time is reported separately.
Reported: images/s of each and the ratio prepared / folder (same worker count, and best vs best).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_common as bc
import torch
from torch.utils.data import DataLoader
from torchvision.io import encode_jpeg

from peanchor.data import DataSpec, build_datasets, prepare_dataset

NAME = "data"
IMG_SIZE = 224
SOURCE_SIZE = 256
CLASSES = 10
BATCH = 64


def make_imagefolder(root: Path, num_images: int, seed: int = 0, distinct: int = 64) -> None:
    """``root/{train,val}/cNN/*.jpg``: ``num_images`` in val, one per class in train.

    ``distinct`` different JPEGs are encoded and cycled over the files (every file is still decoded).
    """
    g = torch.Generator().manual_seed(seed)
    blobs = []
    for _ in range(distinct):
        # A smooth low-resolution field upsampled, plus fine noise: compresses like a photo, not like noise.
        coarse = torch.rand(1, 3, 8, 8, generator=g) * 255
        image = torch.nn.functional.interpolate(coarse, size=(SOURCE_SIZE, SOURCE_SIZE), mode="bicubic")[0]
        image = (image + torch.randn(image.shape, generator=g) * 12).clamp(0, 255).to(torch.uint8)  # (3, H, W)
        blobs.append(encode_jpeg(image, quality=90).numpy().tobytes())
    for split, count in (("val", num_images), ("train", CLASSES)):
        for i in range(count):
            directory = root / split / f"c{i % CLASSES:02d}"
            directory.mkdir(parents=True, exist_ok=True)
            (directory / f"{i:05d}.jpg").write_bytes(blobs[i % distinct])


def full_pass(dataset: Any, workers: int) -> int:
    loader = DataLoader(
        dataset, batch_size=BATCH, shuffle=True, num_workers=workers, generator=torch.Generator().manual_seed(0)
    )
    count = 0
    for images, _ in loader:  # (B, 3, 224, 224) uint8
        assert images.dtype == torch.uint8 and images.shape[-1] == IMG_SIZE
        count += images.shape[0]
    return count


def run(num_images: int, reps: int, workers: tuple[int, ...], keep: Path | None = None) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="peanchor-bench-data-")) if keep is None else keep
    try:
        t0 = time.perf_counter()
        make_imagefolder(tmp / "folder", num_images)
        gen_s = time.perf_counter() - t0
        spec = DataSpec(name="imagefolder", root=str(tmp / "folder"), img_size=IMG_SIZE)
        t0 = time.perf_counter()
        prepare_dataset(spec, tmp / "prepared", num_workers=0)
        prepare_s = time.perf_counter() - t0
        _, folder_val, _ = build_datasets(spec)
        _, prepared_val, _ = build_datasets(DataSpec(name="prepared", root=str(tmp / "prepared"), img_size=IMG_SIZE))
        assert len(folder_val) == len(prepared_val) == num_images
        # Same pixels: the prepared split is the decoded, resized folder split.
        a, b = folder_val[0][0], prepared_val[0][0]
        max_pixel_diff = int((a.int() - b.int()).abs().max())
        print(
            f"data: {num_images} JPEGs {SOURCE_SIZE}px -> {IMG_SIZE}px, batch {BATCH}, workers {workers}, "
            f"{reps} reps (generated in {gen_s:.1f} s, prepared in {prepare_s:.1f} s)",
            flush=True,
        )
        candidates = {}
        for w in workers:
            candidates[f"folder_w{w}"] = lambda w=w: full_pass(folder_val, w)
            candidates[f"prepared_w{w}"] = lambda w=w: full_pass(prepared_val, w)
        times = bc.interleaved(candidates, reps=reps, warmup=1)
    finally:
        if keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
    rates = {name: num_images / bc.median(t) for name, t in times.items()}
    record: dict[str, Any] = {
        "num_images": num_images,
        "source_size": SOURCE_SIZE,
        "img_size": IMG_SIZE,
        "batch": BATCH,
        "workers": list(workers),
        "reps": reps,
        "generate_s": gen_s,
        "prepare_once_s": prepare_s,
        "prepare_images_per_s": (num_images + CLASSES) / prepare_s,
        "max_pixel_diff_first_image": max_pixel_diff,
        "times": {name: bc.stats(t) for name, t in times.items()},
        "images_per_s": rates,
        "ratios": {f"prepared_w{w}/folder_w{w}": rates[f"prepared_w{w}"] / rates[f"folder_w{w}"] for w in workers},
    }
    best_folder = max(v for k, v in rates.items() if k.startswith("folder"))
    best_prepared = max(v for k, v in rates.items() if k.startswith("prepared"))
    record["ratio_best_vs_best"] = best_prepared / best_folder
    for name, rate in rates.items():
        print(f"  {name}: {rate:,.0f} images/s")
    for name, r in record["ratios"].items():
        print(f"  {name} = {r:.1f}x")
    print(f"  best prepared / best folder = {record['ratio_best_vs_best']:.1f}x")
    return record


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = bc.parser(__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=None)
    p.add_argument("--reps", type=int, default=None)
    p.add_argument("--workers", default="0,2", help="comma-separated DataLoader worker counts")
    args = p.parse_args(argv)
    bc.apply_threads(args.threads)
    machine = bc.machine_info()
    workers = tuple(int(w) for w in args.workers.split(","))
    record = run(args.images or (300 if args.quick else 2000), args.reps or (1 if args.quick else 3), workers)
    record.update(goal="report the ratio (no target)", quick=args.quick, machine=bc.finish_machine_info(machine))
    if not args.no_write:
        bc.write_record(NAME + ("_quick" if args.quick else ""), record, args.out)
    return record


if __name__ == "__main__":
    main()
