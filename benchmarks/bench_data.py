"""Images per second into training: JPEG ImageFolder vs the prepared uint8 memmap, with the paper's augmentation.

    python3 benchmarks/bench_data.py            # 2000 JPEGs at 256x256 -> 224 px
    python3 benchmarks/bench_data.py --quick    # 300 JPEGs, 1 rep

A temporary ImageFolder is generated (``{train,val}/<class>/*.jpg``, smooth random scenes plus noise,
JPEG quality 90, 64 distinct images cycled over the files) and prepared once into uint8 memmaps.
Candidates, each a full pass over a split in batches of 64:

* ``folder_train_wN``: the training path of the ``imagefolder`` loader: per image, decode +
  ``RandomResizedCrop(224, scale=(0.35, 1))`` + flip (torchvision v2) in ``N`` DataLoader workers;
* ``prepared_train_wN``: the training path of the prepared memmap: workers only read uint8 batches
  (one fancy-index read each), the loop copies them to ``--device`` and runs the same augmentation there
  as one batched ``grid_sample`` (``peanchor.data.batch_augment``); on this CPU-only machine that
  "device" is the main process's CPU;
* ``folder_val_wN``, ``prepared_val_wN``: the evaluation split, decode + ``Resize((224, 224))`` vs the
  memmap read, no augmentation (what the previous version of this benchmark measured).

Both training paths are the loop's own (:func:`peanchor.training.loaders.train_data`: keyed sample
streams, persistent workers; pinned memory on CUDA) and start their workers in the untimed warm-up, as in
every epoch after the first. The prepared files were just written, so they are in the page cache.
Reported: images/s of each and the ratios prepared / folder, per split and worker count.
"""

from __future__ import annotations

import itertools
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_common as bc
import torch
from torch.utils.data import DataLoader, Dataset
from torchvision.io import encode_jpeg

from peanchor.data import DataSpec, batch_augment, build_datasets, prepare_dataset
from peanchor.training.config import TrainConfig
from peanchor.training.distributed import DistContext
from peanchor.training.loaders import close_loader, train_data
from peanchor.training.step import DeviceBatches

NAME = "data"
IMG_SIZE = 224
SOURCE_SIZE = 256
CLASSES = 10
BATCH = 64


def make_imagefolder(root: Path, num_images: int, seed: int = 0, distinct: int = 64) -> None:
    """``root/{train,val}/cNN/*.jpg``: ``num_images`` in each split.

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
    for split, count in (("val", num_images), ("train", num_images)):
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


class TrainingPath:
    """Passes over ``dataset`` as the training loop feeds it: its loaders, the copy to ``device`` and, for array
    datasets, the batch augmentation there. Call :meth:`close` at the end (the workers persist)."""

    def __init__(
        self, dataset: Dataset, *, workers: int, batch: int, device: torch.device, img_size: int = IMG_SIZE
    ) -> None:
        config = TrainConfig()
        config.train.batch_size, config.train.num_workers = batch, workers
        self.device = device
        self.data = train_data(dataset, config, DistContext(device=device))
        self.generator = torch.Generator(device=device)
        self.epochs = itertools.count()
        self.img_size = img_size

    def __call__(self) -> int:
        self.data.batches.set_epoch(next(self.epochs))
        count = 0
        for step, (images, labels) in enumerate(DeviceBatches(self.data.loader, self.device)):
            if self.data.device_augment != "none":
                self.generator.manual_seed(step)
                images = batch_augment(images, self.data.device_augment, generator=self.generator)
            assert images.dtype == torch.uint8 and images.shape[-1] == self.img_size
            count += labels.numel()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return count

    def close(self) -> None:
        close_loader(self.data.loader)


def run(
    num_images: int, reps: int, workers: tuple[int, ...], device: torch.device, keep: Path | None = None
) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="peanchor-bench-data-")) if keep is None else keep
    paths: list[TrainingPath] = []
    try:
        t0 = time.perf_counter()
        make_imagefolder(tmp / "folder", num_images)
        gen_s = time.perf_counter() - t0
        spec = DataSpec(name="imagefolder", root=str(tmp / "folder"), img_size=IMG_SIZE, augment="rrc_flip")
        t0 = time.perf_counter()
        prepare_dataset(spec, tmp / "prepared", num_workers=0)
        prepare_s = time.perf_counter() - t0
        folder_train, folder_val, _ = build_datasets(spec)
        prepared = DataSpec(name="prepared", root=str(tmp / "prepared"), img_size=IMG_SIZE, augment="rrc_flip")
        prepared_train, prepared_val, _ = build_datasets(prepared)
        assert len(folder_val) == len(prepared_val) == len(prepared_train) == num_images
        # Same pixels: the prepared split is the decoded, resized folder split.
        a, b = folder_val[0][0], prepared_val[0][0]
        max_pixel_diff = int((a.int() - b.int()).abs().max())
        print(
            f"data: {num_images} JPEGs {SOURCE_SIZE}px -> {IMG_SIZE}px, batch {BATCH}, workers {workers}, "
            f"augmentation on {device}, {reps} reps (generated in {gen_s:.1f} s, prepared in {prepare_s:.1f} s)",
            flush=True,
        )
        candidates: dict[str, Callable[[], int]] = {}
        for w in workers:
            for name, dataset in (("folder_train", folder_train), ("prepared_train", prepared_train)):
                paths.append(TrainingPath(dataset, workers=w, batch=BATCH, device=device))
                candidates[f"{name}_w{w}"] = paths[-1]
            candidates[f"folder_val_w{w}"] = lambda w=w: full_pass(folder_val, w)
            candidates[f"prepared_val_w{w}"] = lambda w=w: full_pass(prepared_val, w)
        counts = {name: num_images - num_images % BATCH if "train" in name else num_images for name in candidates}
        times = bc.interleaved(candidates, reps=reps, warmup=1)
    finally:
        for path in paths:
            path.close()
        if keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
    rates = {name: counts[name] / bc.median(t) for name, t in times.items()}
    ratios = {}
    for split, w in itertools.product(("train", "val"), workers):
        prepared, folder = f"prepared_{split}_w{w}", f"folder_{split}_w{w}"
        ratios[f"{prepared}/{folder}"] = rates[prepared] / rates[folder]
    best = {k: max(v for n, v in rates.items() if n.startswith(k)) for k in
            ("folder_train", "prepared_train", "folder_val", "prepared_val")}  # fmt: skip
    record: dict[str, Any] = {
        "num_images": num_images,
        "source_size": SOURCE_SIZE,
        "img_size": IMG_SIZE,
        "batch": BATCH,
        "workers": list(workers),
        "augment": "rrc_flip",
        "augment_device": str(device),
        "reps": reps,
        "generate_s": gen_s,
        "prepare_once_s": prepare_s,
        "prepare_images_per_s": 2 * num_images / prepare_s,
        "max_pixel_diff_first_image": max_pixel_diff,
        "times": {name: bc.stats(t) for name, t in times.items()},
        "images_per_s": rates,
        "ratios": ratios,
        "ratio_train_best_vs_best": best["prepared_train"] / best["folder_train"],
        "ratio_val_best_vs_best": best["prepared_val"] / best["folder_val"],
    }
    for name, rate in rates.items():
        print(f"  {name}: {rate:,.0f} images/s")
    for name, r in ratios.items():
        print(f"  {name} = {r:.1f}x")
    print(f"  training path, best prepared / best folder = {record['ratio_train_best_vs_best']:.1f}x "
          f"(eval split: {record['ratio_val_best_vs_best']:.1f}x)")  # fmt: skip
    return record


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = bc.parser(__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=None)
    p.add_argument("--reps", type=int, default=None)
    p.add_argument("--workers", default="0,2", help="comma-separated DataLoader worker counts")
    p.add_argument("--device", default="cpu", help="where the prepared path's batch augmentation runs (cpu, cuda)")
    args = p.parse_args(argv)
    bc.apply_threads(args.threads)
    machine = bc.machine_info()
    workers = tuple(int(w) for w in args.workers.split(","))
    images = args.images or (300 if args.quick else 2000)
    record = run(images, args.reps or (1 if args.quick else 3), workers, torch.device(args.device))
    record.update(goal="report the ratio (no target)", quick=args.quick, machine=bc.finish_machine_info(machine))
    if not args.no_write:
        bc.write_record(NAME + ("_quick" if args.quick else ""), record, args.out)
    return record


if __name__ == "__main__":
    main()
