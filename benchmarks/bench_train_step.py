"""One full training step of peanchor's ViT vs timm's ``VisionTransformer`` with identical dimensions.

    python3 benchmarks/bench_train_step.py            # vit_tiny @ 32 px (eager + compile), vit_paper @ 224 px (eager)
    python3 benchmarks/bench_train_step.py --quick    # vit_tiny only, small batch, no compile

Both models: learned absolute PE (ours: ``pe="ape"``; timm: ``pos_embed="learn"``) added after the
CLS concat, CLS-token pooling, no final norm, no fc norm, dropout and drop-path 0, LayerNorm eps
1e-6, train mode, AdamW. A step is forward, cross-entropy, backward and ``optimizer.step()``. Our
weights are copied into the timm model first, and the logits are checked equal: the two compute
the same function, so only the implementation is timed.

Goal: ratio = timm step time / ours >= 1.0 eager, and >= 1.1 with ``torch.compile`` (ours compiled
vs eager timm; compiled timm is reported too).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_common as bc
import torch
import torch.nn.functional as F
from torch import nn

from peanchor.models import MODEL_SIZES, create_model

NAME = "train_step"
GOAL_EAGER = 1.0
GOAL_COMPILE = 1.1
NUM_CLASSES = 100
NORM_EPS = 1e-6  # timm's ViT LayerNorm eps


def build_pair(size: str, img_size: int) -> tuple[nn.Module, nn.Module]:
    """Our ViT and a timm ViT with the same architecture and the same weights."""
    from timm.models.vision_transformer import VisionTransformer as TimmViT

    arch = MODEL_SIZES[size]
    ours = create_model(
        size,
        pe="ape",
        num_classes=NUM_CLASSES,
        img_size=img_size,
        drop_rate=0.0,
        attn_drop_rate=0.0,
        drop_path_rate=0.0,
        final_norm=False,
        norm_eps=NORM_EPS,
    )
    theirs = TimmViT(
        img_size=img_size,
        patch_size=arch["patch_size"],
        num_classes=NUM_CLASSES,
        global_pool="token",
        embed_dim=arch["embed_dim"],
        depth=arch["depth"],
        num_heads=arch["num_heads"],
        mlp_ratio=arch["mlp_ratio"],
        qkv_bias=True,
        class_token=True,
        pos_embed="learn",
        no_embed_class=False,
        final_norm=False,
        fc_norm=False,
        drop_rate=0.0,
        pos_drop_rate=0.0,
        proj_drop_rate=0.0,
        attn_drop_rate=0.0,
        drop_path_rate=0.0,
    )
    state = {("pos_embed" if k == "pe.table" else k): v for k, v in ours.state_dict().items()}
    theirs.load_state_dict(state, strict=True)  # raises if any name or shape differs
    return ours, theirs


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def check_same_function(ours: nn.Module, theirs: nn.Module, img_size: int) -> float:
    x = torch.randn(2, 3, img_size, img_size, generator=torch.Generator().manual_seed(0))
    ours.eval(), theirs.eval()
    with torch.no_grad():
        diff = (ours(x) - theirs(x)).abs().max().item()
    ours.train(), theirs.train()
    if diff > 1e-4:
        raise AssertionError(f"our ViT and timm's disagree by {diff:g} on the same weights")
    return diff


def make_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> Any:
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()

    return step


def bench_config(size: str, img_size: int, batch: int, reps: int, compile_: bool, compile_timm: bool) -> dict[str, Any]:
    print(f"{size} @ {img_size} px, batch {batch}, {reps} reps, compile={compile_}", flush=True)
    torch.manual_seed(0)
    ours, theirs = build_pair(size, img_size)
    params = {"ours": num_params(ours), "timm": num_params(theirs)}
    if params["ours"] != params["timm"]:
        raise AssertionError(f"parameter counts differ: {params}")
    max_diff = check_same_function(ours, theirs, img_size)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, 3, img_size, img_size, generator=g)
    y = torch.randint(0, NUM_CLASSES, (batch,), generator=g)
    steps = {"ours": make_step(ours, x, y), "timm": make_step(theirs, x, y)}
    out: dict[str, Any] = {
        "model": size,
        "img_size": img_size,
        "batch": batch,
        "reps": reps,
        "num_params": params,
        "max_logit_diff_same_weights": max_diff,
    }
    compile_notes: dict[str, Any] = {}
    if compile_:
        for name, module in (("ours_compiled", ours), ("timm_compiled", theirs)):
            if name == "timm_compiled" and not compile_timm:
                continue
            try:
                # A separate module object shares the parameters; its own optimizer keeps state apart.
                compiled = torch.compile(module)
                step = make_step(compiled, x, y)
                t0 = time.perf_counter()
                step()  # compiles forward and backward
                compile_notes[f"{name}_first_step_s"] = time.perf_counter() - t0
                steps[name] = step
            except Exception as e:  # noqa: BLE001 - no C++ compiler, unsupported op, ...: record why
                compile_notes[f"{name}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                print(f"  torch.compile failed for {name}: {compile_notes[f'{name}_error']}", flush=True)
    times = bc.interleaved(steps, reps=reps, warmup=1)
    out["times"] = bc.all_stats(times)
    out["ratio_eager"] = bc.ratio(times["timm"], times["ours"])
    out["ratio_eager_cpu_time"] = bc.ratio(times.cpu["timm"], times.cpu["ours"])
    out["ratio_eager_of_min"] = bc.ratio_of_min(times["timm"], times["ours"])
    out["ratio_eager_paired"] = bc.paired_ratio(times["timm"], times["ours"])
    out["verdict_eager"] = bc.verdict(out["ratio_eager"], GOAL_EAGER, True)
    if "ours_compiled" in times:
        out["ratio_compiled_vs_timm_eager"] = bc.ratio(times["timm"], times["ours_compiled"])
        out["ratio_compiled_vs_timm_eager_of_min"] = bc.ratio_of_min(times["timm"], times["ours_compiled"])
        out["ratio_compiled_vs_timm_eager_paired"] = bc.paired_ratio(times["timm"], times["ours_compiled"])
        out["verdict_compiled"] = bc.verdict(out["ratio_compiled_vs_timm_eager"], GOAL_COMPILE, True)
        if "timm_compiled" in times:
            out["ratio_compiled_vs_timm_compiled"] = bc.ratio(times["timm_compiled"], times["ours_compiled"])
            out["ratio_compiled_vs_timm_compiled_of_min"] = bc.ratio_of_min(
                times["timm_compiled"], times["ours_compiled"]
            )
            out["ratio_compiled_vs_timm_compiled_paired"] = bc.paired_ratio(
                times["timm_compiled"], times["ours_compiled"]
            )
    if compile_notes:
        out["compile"] = compile_notes
    print(
        f"  eager: timm/ours = {out['ratio_eager']:.3f} (goal >= {GOAL_EAGER}) -> {out['verdict_eager']}; "
        f"paired {out['ratio_eager_paired']:.3f}, by CPU time {out['ratio_eager_cpu_time']:.3f}"
    )
    if "ratio_compiled_vs_timm_eager" in out:
        print(
            f"  compiled ours vs eager timm: {out['ratio_compiled_vs_timm_eager']:.3f} (goal >= {GOAL_COMPILE}) "
            f"-> {out['verdict_compiled']}; paired {out['ratio_compiled_vs_timm_eager_paired']:.3f}"
        )
    if "ratio_compiled_vs_timm_compiled" in out:
        print(
            f"  compiled ours vs compiled timm: {out['ratio_compiled_vs_timm_compiled']:.3f}; "
            f"paired {out['ratio_compiled_vs_timm_compiled_paired']:.3f}"
        )
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = bc.parser(__doc__.splitlines()[0])
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile comparison")
    p.add_argument("--reps", type=int, default=None)
    args = p.parse_args(argv)
    bc.apply_threads(args.threads)
    machine = bc.machine_info()
    configs = []
    if args.quick:
        configs.append(bench_config("vit_tiny", 32, 32, args.reps or 3, compile_=False, compile_timm=False))
    else:
        compile_ = not args.no_compile
        configs.append(bench_config("vit_tiny", 32, 128, args.reps or 15, compile_=compile_, compile_timm=compile_))
        configs.append(bench_config("vit_paper", 224, 8, args.reps or 5, compile_=False, compile_timm=False))
    record = {
        "goal": f"timm step time / ours >= {GOAL_EAGER} eager, >= {GOAL_COMPILE} with torch.compile",
        "quick": args.quick,
        "configs": configs,
        "machine": bc.finish_machine_info(machine),
    }
    if not args.no_write:
        bc.write_record(NAME + ("_quick" if args.quick else ""), record, args.out)
    return record


if __name__ == "__main__":
    main()
