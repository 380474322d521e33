"""The paper grid's path at GPU speed: training, the SSDC probe, per-image SSDC and the data path, in one run.

    python3 benchmarks/bench_gpu.py                          # vit_paper @ 224 px, batch 128, on cuda (< 5 min)
    python3 benchmarks/bench_gpu.py --quick --device cpu     # the same code paths at tiny sizes, in seconds

Everything is measured side by side in one process (``bench_common.interleaved``: repetition *r* runs every
candidate once, in an order that rotates with *r*; CUDA is synchronised at the end of each call).

1. **Training**, the loop's own step (``TrainingForward`` → backward → AdamW, fused on CUDA;
   ``configure_backends`` for the precision flags), APE, batch 128, one fixed uint8 batch on the device:
   ``fp32`` (float32, TF32 off), ``bf16`` (bf16 autocast, TF32 for what stays float32) and ``bf16_compile``
   (the same with ``torch.compile`` of the step: forward, loss and, through AOTAutograd, backward). Reported:
   images/s and **MFU** = images/s × FLOPs per training image / the GPU's peak dense bf16 FLOP/s. FLOPs come
   from the model's architecture (:func:`peanchor.models.train_flops`: 2 per multiply-add of every matmul and
   convolution, a training step = 3 × the forward pass; elementwise ops not counted; 27.6 GFLOP per image for
   ``vit_paper``). The peak is NVIDIA's datasheet figure for the GPUs in :data:`PEAK_BF16_TFLOPS`, or
   ``--peak-tflops``; all three settings are measured against the bf16 peak. Unknown: MFU is left out.
2. **SSDC probe** (goal ≤ 1.15): ``acc.update(model.spatial_tokens(x))`` vs ``model(x)``, eval, inference mode,
   bf16 autocast on CUDA as the analysis runs, batch 256.
3. **Per-image SSDC** (goal ≥ 50 on a GPU): ``bench_per_image_ssdc.run`` with peanchor's side on the device
   against the scipy loop on the CPU (N = 196, L = 12, B = 256, D = 384), equal to 1e-6.
4. **Data path** (goal ≥ 1.2): a prepared uint8 memmap of 224 px images through the loop's loader (keyed sample
   streams, ``--workers`` persistent workers, pinned memory, side-stream copy) with the paper's augmentation
   (``rrc_flip``) on the device batch (``bench_data.TrainingPath``), in images/s, divided by the best training
   setting's images/s. Below 1.2 the GPU would wait for data.

``--quick`` uses ``vit_micro`` at 16 px and small sizes, and compiles with the ``eager`` backend (Dynamo traces
the step, as on a GPU, without inductor's minutes of C++ compilation on a CPU; ``--compile-backend inductor``
overrides). A test runs ``--quick --device cpu`` so that this script cannot rot. Writes
``benchmarks/results/gpu.json`` (``gpu_quick.json``).
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_common as bc
import numpy as np
import torch

from peanchor.data import IMAGENET_MEAN, IMAGENET_STD, ArrayDataset
from peanchor.metrics import SSDCAccumulator
from peanchor.models import create_model, train_flops
from peanchor.training.config import OptimConfig, TrainConfig
from peanchor.training.loop import param_groups
from peanchor.training.step import TrainingForward, autocast, build_optimizer, configure_backends

NAME = "gpu"
GOALS = {"probe_ratio_max": 1.15, "per_image_ssdc_min": 50.0, "data_ratio_min": 1.2}
# Peak dense bf16 tensor-core throughput (TFLOP/s, without sparsity), NVIDIA's datasheets; matched in order.
PEAK_BF16_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H200", 989.0),
    ("H100 PCIe", 756.0),
    ("H100", 989.0),  # SXM
    ("A100", 312.0),
)
SETTINGS = {  # name: (bf16 autocast, torch.compile)
    "fp32": (False, False),
    "bf16": (True, False),
    "bf16_compile": (True, True),
}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_flops(device: torch.device, override_tflops: float | None) -> tuple[float | None, str]:
    if override_tflops:
        return override_tflops * 1e12, f"--peak-tflops {override_tflops:g}"
    if device.type != "cuda":
        return None, "no peak known for this device (give --peak-tflops)"
    name = torch.cuda.get_device_name(device)
    for key, tflops in PEAK_BF16_TFLOPS:
        if key in name:
            return tflops * 1e12, f"{name}: {tflops:g} TFLOP/s dense bf16 (datasheet)"
    return None, f"{name}: peak unknown (give --peak-tflops)"


def training(args: Any, device: torch.device, peak: float | None) -> dict[str, Any]:
    size, img, batch, steps = args.model, args.img_size, args.batch, args.steps
    steps_fns: dict[str, Callable[[], None]] = {}
    first_call: dict[str, float] = {}
    flops = None
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (batch, 3, img, img), dtype=torch.uint8, generator=g).to(device)
    labels = torch.randint(0, 100, (batch,), generator=g).to(device)
    for name, (amp, compiled) in SETTINGS.items():
        torch.manual_seed(0)
        model = create_model(size, pe="ape", num_classes=100, img_size=img).to(device).train()
        flops = train_flops(model)
        config = TrainConfig()
        config.train.amp, config.train.tf32 = amp, amp  # fp32: TF32 off (true float32); bf16: TF32 on
        forward: torch.nn.Module = TrainingForward(model, IMAGENET_MEAN, IMAGENET_STD, 0.1, amp)
        if compiled:
            forward = torch.compile(forward, backend=args.compile_backend)
        optimizer = build_optimizer(param_groups(model, 0.05, 1.0, 0.05, True), OptimConfig(), device)

        def run_steps(forward: torch.nn.Module = forward, optimizer: Any = optimizer, config: Any = config) -> None:
            configure_backends(config, device)
            for _ in range(steps):
                loss, _ = forward(images, labels)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
            sync(device)

        t0 = time.perf_counter()
        run_steps()  # the first call compiles (bf16_compile) and warms the allocator and cuDNN's choices
        first_call[name] = time.perf_counter() - t0
        steps_fns[name] = run_steps
        print(f"  {name}: first call {first_call[name]:.1f} s", flush=True)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = bc.interleaved(steps_fns, reps=args.reps, warmup=0)
    out: dict[str, Any] = {"model": size, "img_size": img, "batch": batch, "steps_per_call": steps,
                           "train_flops_per_image": flops, "first_call_s": first_call, "times": bc.all_stats(times),
                           "settings": {}}  # fmt: skip
    for name in SETTINGS:
        rate = batch * steps / bc.median(times[name])
        out["settings"][name] = {
            "images_per_s": rate,
            "achieved_tflops": rate * flops / 1e12,
            "mfu": None if peak is None else rate * flops / peak,
            "speedup_vs_fp32": bc.ratio(times["fp32"], times[name]),
        }
        mfu = out["settings"][name]["mfu"]
        print(f"  {name}: {rate:,.0f} img/s, {rate * flops / 1e12:.1f} TFLOP/s"
              + ("" if mfu is None else f", MFU {mfu:.1%}"))  # fmt: skip
    out["best"] = max(out["settings"], key=lambda n: out["settings"][n]["images_per_s"])
    if device.type == "cuda":
        out["max_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    return out


def probe(args: Any, device: torch.device) -> dict[str, Any]:
    torch.manual_seed(0)
    model = create_model(args.model, pe="ape", num_classes=100, img_size=args.img_size).to(device).eval()
    x = torch.randn(args.probe_batch, 3, args.img_size, args.img_size, generator=torch.Generator().manual_seed(1))
    x = x.to(device)

    def forward() -> None:
        with torch.inference_mode(), autocast(device, True):
            model(x)
        sync(device)

    def probed() -> None:
        with torch.inference_mode(), autocast(device, True):
            acc = SSDCAccumulator(model.grid)
            acc.update(model.spatial_tokens(x))  # (B, L, N, D)
            acc.compute()
        sync(device)

    times = bc.interleaved({"forward": forward, "probe": probed}, reps=args.reps, warmup=1)
    ratio = bc.ratio(times["probe"], times["forward"])
    print(f"  SSDC probe / forward = {ratio:.3f} (goal <= {GOALS['probe_ratio_max']})")
    return {"batch": args.probe_batch, "times": bc.all_stats(times), "ratio": ratio,
            "ratio_paired": bc.paired_ratio(times["probe"], times["forward"]),
            "verdict": bc.verdict(ratio, GOALS["probe_ratio_max"], False)}  # fmt: skip


def per_image(args: Any, device: torch.device) -> dict[str, Any]:
    import bench_per_image_ssdc

    q = args.quick
    record = bench_per_image_ssdc.run(6 if q else 256, 3 if q else 12, (5, 5) if q else (14, 14), 8 if q else 384,
                                      3 if q else 16, args.reps, device=str(device))  # fmt: skip
    record["verdict"] = bc.verdict(record["ratio"], GOALS["per_image_ssdc_min"], True)
    return record


def data_path(args: Any, device: torch.device, train_rate: float, root: Path) -> dict[str, Any]:
    from bench_data import TrainingPath

    n, img = args.data_images, args.img_size
    path = root / "train.npy"
    images = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=(n, 3, img, img))
    rng = np.random.default_rng(0)
    for start in range(0, n, 256):  # content does not change read or resampling speed
        images[start : start + 256] = rng.integers(0, 256, (min(256, n - start), 3, img, img), dtype=np.uint8)
    images.flush()
    del images
    dataset = ArrayDataset(np.load(path, mmap_mode="r"), np.arange(n) % 100, img_size=img, policy="rrc_flip",
                           path=path)  # fmt: skip
    paths = {f"w{w}": TrainingPath(dataset, workers=w, batch=args.batch, device=device, img_size=img)
             for w in args.workers}  # fmt: skip
    try:
        times = bc.interleaved(paths, reps=args.reps, warmup=1)  # the warm-up starts the persistent workers
    finally:
        for p in paths.values():
            p.close()
    per_pass = (n // args.batch) * args.batch
    rates = {name: per_pass / bc.median(t) for name, t in times.items()}
    best = max(rates, key=rates.__getitem__)
    ratio = rates[best] / train_rate
    print(f"  data path: {', '.join(f'{k} {v:,.0f} img/s' for k, v in rates.items())}; best / training = "
          f"{ratio:.2f} (goal >= {GOALS['data_ratio_min']})")  # fmt: skip
    return {"images": n, "augment": "rrc_flip", "augment_device": str(device), "workers": list(args.workers),
            "times": bc.all_stats(times), "images_per_s": rates, "best": best, "train_images_per_s": train_rate,
            "ratio_data_to_training": ratio, "verdict": bc.verdict(ratio, GOALS["data_ratio_min"], True)}  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from peanchor.study.resources import usable_cpus

    p = bc.parser(__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    p.add_argument("--peak-tflops", type=float, default=None, help="the device's peak dense bf16 TFLOP/s for MFU")
    p.add_argument("--workers", default=None, help="DataLoader worker counts for the data path (default: half and "
                   "all of the usable CPUs, at most 16)")  # fmt: skip
    p.add_argument("--compile-backend", default=None,
                   help="torch.compile backend (default inductor; eager with --quick)")
    p.add_argument("--reps", type=int, default=None)
    args = p.parse_args(argv)
    bc.apply_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench_gpu: CUDA is not available here; use --quick --device cpu to check the code paths")
    q = args.quick
    args.model, args.img_size = ("vit_micro", 16) if q else ("vit_paper", 224)
    args.batch, args.steps, args.probe_batch = (8, 2, 8) if q else (128, 10, 256)
    args.reps = args.reps or (2 if q else 5)
    args.data_images = 64 if q else 8192
    args.compile_backend = args.compile_backend or ("eager" if q else "inductor")
    cpus = min(16, usable_cpus())
    args.workers = [int(w) for w in args.workers.split(",")] if args.workers else (
        [0] if q else sorted({max(1, cpus // 2), cpus}))  # fmt: skip
    machine = bc.machine_info()
    if device.type == "cuda":
        machine.update(gpu=torch.cuda.get_device_name(device), cuda_version=torch.version.cuda,
                       cudnn=torch.backends.cudnn.version(), usable_cpus=usable_cpus())  # fmt: skip
    peak, peak_note = peak_flops(device, args.peak_tflops)
    print(f"bench_gpu on {device} ({machine.get('gpu', machine['cpu'])}), {args.model} @ {args.img_size} px; "
          f"peak: {peak_note}", flush=True)  # fmt: skip
    started = time.perf_counter()
    print("training", flush=True)
    train = training(args, device, peak)
    print("SSDC probe", flush=True)
    probe_record = probe(args, device)
    print("per-image SSDC", flush=True)
    per_image_record = per_image(args, device)
    print("data path", flush=True)
    with tempfile.TemporaryDirectory(prefix="peanchor-bench-gpu-") as tmp:
        data = data_path(args, device, train["settings"][train["best"]]["images_per_s"], Path(tmp))
    record = {
        "quick": q, "device": str(device), "peak_flops": peak, "peak_note": peak_note, "goals": GOALS,
        "mfu_counting": "train_flops(model) = 3 x forward FLOPs from the architecture (2 per multiply-add of every "
                        "matmul and convolution); MFU = images/s x that / peak dense bf16 FLOP/s",
        "compile_backend": args.compile_backend, "training": train, "ssdc_probe": probe_record,
        "per_image_ssdc": per_image_record, "data_path": data, "seconds": time.perf_counter() - started,
        "machine": bc.finish_machine_info(machine),
    }  # fmt: skip
    print(f"done in {record['seconds']:.0f} s")
    if not args.no_write:
        bc.write_record(NAME + ("_quick" if q else ""), record, args.out)
    return record


if __name__ == "__main__":
    main()
