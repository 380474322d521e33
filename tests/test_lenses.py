"""The lenses beside SSDC in the models and the evaluation suite: the attention weights are the ones each block
uses, the suite's numbers equal the accumulators run by hand, and the issue's three invariants.

Invariant models: the sin-cos model is tested at init (its layer 0 is LN1 of a fixed smooth code plus small
random patch embeddings, so it is decodable by construction) and after a short training run on a small
spatial task; the no-PE models are trained briefly (their invariants hold for any weights, so training only makes the
test harder: content then does carry position).
"""

from __future__ import annotations

import pytest
import torch

from peanchor.analysis.evalset import EvalSet
from peanchor.analysis.evaluate import evaluate_model
from peanchor.analysis.passes import PassRunner
from peanchor.data import normalize
from peanchor.interventions import random_permutation
from peanchor.metrics import SSDCAccumulator
from peanchor.metrics.attention_distance import AttentionDistanceAccumulator
from peanchor.metrics.position_probe import DEFAULT_HOLDOUT, DEFAULT_RIDGE, PositionProbeAccumulator, heldout_mask
from peanchor.pe import PE_NAMES, PE_REGISTRY
from peanchor.results.records import analysis_rows

from tests.helpers.builders import plan, tiny_info

INFO = tiny_info(["red", "green"], "sky-and-blob")
BATCH = 16


def scene_images(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """16 px scenes whose content carries position: a bright sky over dark ground, and a 6×6 blob anywhere whose
    colour (red / green) is the label, so that a model without a PE can learn the task too."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(n, 3, 16, 16, generator=g) * 60).to(torch.uint8)  # (n, 3, 16, 16) noise
    x[:, 2, :6] += 150  # sky
    labels = torch.randint(0, 2, (n,), generator=g)
    corners = torch.randint(0, 11, (n, 2), generator=g)
    for k in range(n):
        r, c = corners[k].tolist()
        x[k, int(labels[k]), r : r + 6, c : c + 6] = 250
    return x, labels



@pytest.fixture(scope="module")
def evalset() -> EvalSet:
    images, labels = scene_images(256, seed=5)
    return EvalSet.from_tensors(images, labels, INFO)


@pytest.fixture(scope="module")
def trained(fit_briefly, micro) -> dict[str, torch.nn.Module]:
    """vit_micro models trained briefly on the blob-colour task (well above chance)."""
    images, labels = scene_images(512, seed=0)
    return {pe: fit_briefly(micro(pe, num_classes=2), images, labels, INFO) for pe in ("none", "sincos", "ape")}


def images(n: int = 4, seed: int = 2) -> torch.Tensor:
    x, _ = scene_images(n, seed=seed)
    return normalize(x, INFO.mean, INFO.std)


# ---- the weights are the ones the block uses ------------------------------------------------------


@pytest.mark.parametrize("pe", PE_NAMES)
def test_attention_weights_times_v_are_the_fused_attention_output(pe, micro):
    """The weights a probed pass hands out (after RoPE, with relbias's bias, CLS a key) times the plain pass's v
    give the plain pass's fused SDPA output, block by block; the logits agree too."""
    model = micro(pe, seed=1, num_classes=2)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4)  # peaked attention, large positional terms: a wrong bias or rotation would show
    perm = random_permutation(model.num_patches, generator=torch.Generator().manual_seed(0))
    alpha = 0.5 if PE_REGISTRY[pe].scalable else 1.0
    outputs, values = [], []
    hooks = [b.attn.proj.register_forward_pre_hook(lambda _m, inp: outputs.append(inp[0])) for b in model.blocks]
    hooks += [b.attn.qkv.register_forward_hook(lambda _m, _i, out: values.append(out)) for b in model.blocks]
    with torch.inference_mode():
        plain = model(images(), token_perm=perm, pe_scale=alpha)  # fused SDPA
        for h in hooks:
            h.remove()
        maps = model.attention_maps(images(), token_perm=perm, pe_scale=alpha)  # (B, L, H, T, T)
        logits, _ = model.forward_with_tokens(images(), token_perm=perm, pe_scale=alpha, attention=lambda i, w: None)
    b, layers, heads, t, _ = maps.shape
    assert (layers, heads, t) == (model.depth, 2, 1 + model.num_patches)
    torch.testing.assert_close(maps.sum(dim=-1), torch.ones(b, layers, heads, t), rtol=0, atol=1e-5)
    for layer in range(layers):
        v = values[layer].view(b, t, 3, heads, -1)[:, :, 2].transpose(1, 2)  # (B, H, T, hd)
        recombined = (maps[:, layer] @ v).transpose(1, 2).reshape(b, t, -1)  # (B, T, D)
        torch.testing.assert_close(recombined, outputs[layer], rtol=0, atol=1e-5)
    torch.testing.assert_close(logits, plain, rtol=0, atol=1e-5)  # the written-out attention is SDPA's


# ---- invariants -----------------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["init", "trained"])
def test_no_pe_attention_under_rpi_is_the_permuted_attention(state, trained, micro):
    """Without a PE the model is permutation-equivariant: under RPI slot i holds the content of position
    perm[i], so its attention to slot j is the unshuffled attention from perm[i] to perm[j] (CLS stays CLS)."""
    model = trained["none"] if state == "trained" else micro("none", num_classes=2)
    perm = random_permutation(model.num_patches, generator=torch.Generator().manual_seed(3))
    index = torch.cat([torch.zeros(1, dtype=torch.long), perm + 1])  # CLS first, then the slots' sources
    with torch.inference_mode():
        normal = model.attention_maps(images(8))  # (B, L, H, T, T)
        shuffled = model.attention_maps(images(8), token_perm=perm)
    torch.testing.assert_close(shuffled, normal[..., index, :][..., index], rtol=0, atol=1e-5)


@pytest.mark.parametrize("pe", ["ape", "sincos"])
def test_with_a_pe_attention_under_rpi_is_not_the_permuted_attention(pe, trained):
    """The control: a trained PE model's attention depends on slots, so the no-PE invariant fails clearly."""
    model = trained[pe]
    perm = random_permutation(model.num_patches, generator=torch.Generator().manual_seed(3))
    index = torch.cat([torch.zeros(1, dtype=torch.long), perm + 1])
    with torch.inference_mode():
        normal, shuffled = model.attention_maps(images(8)), model.attention_maps(images(8), token_perm=perm)
    assert (shuffled - normal[..., index, :][..., index]).abs().max() > 1e-2


@pytest.mark.parametrize("state", ["init", "trained"])
def test_sincos_layer_0_is_decodable_with_and_without_rpi(state, trained, evalset, micro):
    model = trained["sincos"] if state == "trained" else micro("sincos", num_classes=2)
    r = evaluate_model(model, evalset, plan(alphas=(), batch_size=BATCH), info=INFO, device="cpu", progress=False)
    probe = r.position_probe
    assert probe is not None and (probe.fit_images, probe.heldout_images) == (128, 128)
    for values in (probe.row.normal, probe.col.normal, probe.row.rpi, probe.col.rpi):
        assert values[0] >= 0.9, probe


def _shared_permutation_probe(model: torch.nn.Module, evalset: EvalSet, batch_size: int, seed: int = 0) -> torch.Tensor:
    """The probe under RPI as it was before issue 18: fed from the SSDC pass, one permutation per batch shared by the
    fit and the held-out images of that batch. ``(L, 2)`` held-out R²."""
    heldout = heldout_mask(len(evalset), DEFAULT_HOLDOUT, seed=seed)
    g = torch.Generator().manual_seed(seed)
    probe = PositionProbeAccumulator(model.grid, DEFAULT_RIDGE)
    with torch.inference_mode():
        for start in range(0, len(evalset), batch_size):
            x = normalize(evalset.images[start : start + batch_size], INFO.mean, INFO.std)
            _, tokens = model.forward_with_tokens(x, token_perm=random_permutation(model.num_patches, generator=g))
            probe.update(tokens, heldout[start : start + batch_size])
    return probe.compute()


@pytest.mark.parametrize("batch_size", [256, 1, 16], ids=["one-batch", "one-image-per-batch", "many-batches"])
def test_no_pe_probe_is_about_zero_under_rpi_at_every_layer(batch_size, trained, evalset):
    """Without a PE, no slot knows where it is: the held-out R² under RPI is 0 ± 0.05 however the images are batched
    (the fit and the held-out images never pass through the same permutation), while the tokens in order give the
    row away (sky and ground are content that carries it)."""
    r = evaluate_model(trained["none"], evalset, plan(alphas=(), batch_size=batch_size, rpi_mode="per_call", bootstrap=0), info=INFO, device="cpu",
                       progress=False)  # fmt: skip
    probe = r.position_probe
    assert probe is not None and r.clean_acc > 0.9  # trained: the blob's colour needs no position
    for values in (probe.row.rpi, probe.col.rpi):
        assert max(abs(v) for v in values) <= 0.05, probe
    assert probe.row.normal[0] > 0.5


def test_a_shared_permutation_lets_the_no_pe_probe_read_the_content(trained, evalset):
    """The control for the test above: with one permutation shared by every image (one batch), the probe learns
    "content from π(s) ⇒ slot s" and scores it on the held-out images, so the invariant fails clearly."""
    shared = _shared_permutation_probe(trained["none"], evalset, batch_size=256)
    assert shared[:, 0].max() > 0.3, shared


@pytest.mark.parametrize("batch_size", [256, 16])
def test_the_probe_fix_leaves_every_other_number_as_it_was(batch_size, trained, evalset):
    """(per-call RPI, the paper's; the exact oracle without the bootstrap's groups) The probe's own RPI pass changes the
    probe under RPI only: the in-order probe, SSDC (in order and under RPI),
    the attention distances and the accuracies are those of the passes before issue 18 (computed here by hand)."""
    model = trained["none"]
    r = evaluate_model(model, evalset, plan(alphas=(), batch_size=batch_size, rpi_mode="per_call", bootstrap=0), info=INFO, device="cpu", progress=False)
    heldout = heldout_mask(len(evalset), DEFAULT_HOLDOUT, seed=0)
    normal, ssdc, correct = PositionProbeAccumulator(model.grid, DEFAULT_RIDGE), SSDCAccumulator(model.grid), 0
    g = torch.Generator().manual_seed(0)
    rpi_ssdc = SSDCAccumulator(model.grid)
    attention = [AttentionDistanceAccumulator(model.grid), AttentionDistanceAccumulator(model.grid)]  # normal, RPI
    with torch.inference_mode():
        for start in range(0, len(evalset), batch_size):
            x = normalize(evalset.images[start : start + batch_size], INFO.mean, INFO.std)
            _, tokens = model.forward_with_tokens(x, attention=attention[0])
            normal.update(tokens, heldout[start : start + batch_size])
            ssdc.update(tokens)
            perm = random_permutation(model.num_patches, generator=g)
            logits, tokens = model.forward_with_tokens(x, token_perm=perm, attention=attention[1])
            rpi_ssdc.update(tokens)
            correct += int((logits.argmax(-1) == evalset.labels[start : start + batch_size]).sum())
    got = torch.tensor([r.position_probe.row.normal, r.position_probe.col.normal], dtype=torch.float64).T
    torch.testing.assert_close(got, normal.compute(), rtol=0, atol=1e-12)
    assert r.ssdc.normal == ssdc.compute().tolist() and r.ssdc.rpi == rpi_ssdc.compute().tolist()
    assert r.attention_distance.manhattan.normal == attention[0].compute()["manhattan"].tolist()
    assert r.attention_distance.manhattan.rpi == attention[1].compute()["manhattan"].tolist()
    assert r.rpi_acc == correct / len(evalset)


# ---- the suite's numbers are the accumulators run by hand -----------------------------------------


@pytest.mark.parametrize("pe", PE_NAMES)
def test_suite_lenses_equal_the_accumulators_run_by_hand(pe, evalset, micro):
    model = micro(pe, num_classes=2)
    r = evaluate_model(model, evalset, plan(alphas=(), batch_size=64, seed=4, rpi_mode="per_call", bootstrap=0), info=INFO, device="cpu", progress=False)
    heldout = heldout_mask(len(evalset), DEFAULT_HOLDOUT, seed=4)
    by_hand = []
    for draw in (None, 0):  # the normal pass, then RPI draw 0 (one permutation per batch from seed + draw)
        g = torch.Generator().manual_seed(4 + draw) if draw is not None else None
        attention = AttentionDistanceAccumulator(model.grid)
        probe = PositionProbeAccumulator(model.grid, DEFAULT_RIDGE)
        with torch.inference_mode():
            for start in range(0, len(evalset), 64):
                x = normalize(evalset.images[start : start + 64], INFO.mean, INFO.std)
                perm = random_permutation(model.num_patches, generator=g) if g is not None else None
                _, tokens = model.forward_with_tokens(x, token_perm=perm, attention=attention)
                if g is None:
                    probe.update(tokens, heldout[start : start + 64])
            for start in range(0, len(evalset), 64) if g is not None else ():
                # under RPI the probe's own pass: one permutation per image, continuing the draw's generator
                x = normalize(evalset.images[start : start + 64], INFO.mean, INFO.std)
                perm = random_permutation(model.num_patches, batch=x.shape[0], generator=g)  # (B, N)
                probe.update(model.forward_with_tokens(x, token_perm=perm)[1], heldout[start : start + 64])
        by_hand.append((attention.compute(), probe.compute()))
    distance = r.attention_distance
    for (att, pr), mode in zip(by_hand, ("normal", "rpi")):
        for key in ("manhattan", "euclidean", "prefix_mass"):
            torch.testing.assert_close(torch.tensor(getattr(getattr(distance, key), mode), dtype=torch.float64), att[key],
                                       rtol=0, atol=1e-12)  # fmt: skip
        got = torch.tensor([getattr(r.position_probe.row, mode), getattr(r.position_probe.col, mode)], dtype=torch.float64)
        torch.testing.assert_close(got.T, pr, rtol=0, atol=1e-12)
    assert distance.uniform["manhattan"] == pytest.approx(2.5)  # a 4x4 grid
    rows = list(analysis_rows(r))
    heads = [row for row in rows if row["metric"] == "attention_distance_manhattan_rpi"]
    assert len(heads) == model.depth * 2 and {row["head"] for row in heads} == {0, 1}
    assert [row["value"] for row in rows if row["metric"] == "probe_r2_col_normal"] == r.position_probe.col.normal


def _single_draw_by_hand(model, evalset: EvalSet, seed: int, draw: int, batch: int = 64) -> dict:
    """One RPI draw run by hand: its shared permutation per batch (generator ``seed + draw``) for SSDC, attention
    distance and accuracy, then the probe's pass with one permutation per image from the same generator."""
    heldout = heldout_mask(len(evalset), DEFAULT_HOLDOUT, seed=seed)
    g = torch.Generator().manual_seed(seed + draw)
    ssdc, attention = SSDCAccumulator(model.grid), AttentionDistanceAccumulator(model.grid)
    probe, correct = PositionProbeAccumulator(model.grid, DEFAULT_RIDGE), 0
    with torch.inference_mode():
        for start in range(0, len(evalset), batch):
            x = normalize(evalset.images[start : start + batch], INFO.mean, INFO.std)
            perm = random_permutation(model.num_patches, generator=g)  # (N,)
            logits, tokens = model.forward_with_tokens(x, token_perm=perm, attention=attention)
            ssdc.update(tokens)
            correct += int((logits.argmax(-1) == evalset.labels[start : start + batch]).sum())
        for start in range(0, len(evalset), batch):
            x = normalize(evalset.images[start : start + batch], INFO.mean, INFO.std)
            perm = random_permutation(model.num_patches, batch=x.shape[0], generator=g)  # (B, N)
            probe.update(model.forward_with_tokens(x, token_perm=perm)[1], heldout[start : start + batch])
    return {"ssdc": ssdc.compute().numpy(), "attention": {k: v.numpy() for k, v in attention.compute().items()},
            "probe": probe.compute().numpy(), "acc": correct / len(evalset)}  # fmt: skip


@pytest.mark.parametrize("pe", ["rope", "none"])
def test_rpi_draws_average_the_lenses(pe, evalset, micro):
    """Every number averaged over RPI draws (SSDC with its std, the attention distances, the probe, the RPI accuracy)
    is numpy's mean of single-draw runs made by hand with the same permutations."""
    import numpy as np

    model, draws = micro(pe, num_classes=2), 3
    r = evaluate_model(model, evalset, plan(alphas=(), rpi_draws=draws, batch_size=64, seed=7, rpi_mode="per_call",
                                                          bootstrap=0), info=INFO,
                       device="cpu", progress=False)  # fmt: skip
    single = [_single_draw_by_hand(model, evalset, seed=7, draw=k) for k in range(draws)]
    ssdc = np.stack([s["ssdc"] for s in single])  # (K, L)
    np.testing.assert_allclose(r.ssdc.rpi_draws, ssdc, rtol=0, atol=1e-12)
    np.testing.assert_allclose(r.ssdc.rpi, ssdc.mean(axis=0), rtol=0, atol=1e-12)
    np.testing.assert_allclose(r.ssdc.rpi_std, ssdc.std(axis=0, ddof=1), rtol=0, atol=1e-12)
    assert r.delta_ssdc == pytest.approx(ssdc.mean(axis=0)[1] - ssdc.mean(axis=0)[0], abs=1e-12)
    for key in ("manhattan", "euclidean", "prefix_mass"):
        mean = np.mean([s["attention"][key] for s in single], axis=0)  # (L, H)
        np.testing.assert_allclose(getattr(r.attention_distance, key).rpi, mean, rtol=0, atol=1e-12)
    probe = np.mean([s["probe"] for s in single], axis=0)  # (L, 2)
    np.testing.assert_allclose(r.position_probe.row.rpi, probe[:, 0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(r.position_probe.col.rpi, probe[:, 1], rtol=0, atol=1e-12)
    assert r.rpi_acc == pytest.approx(np.mean([s["acc"] for s in single]), abs=1e-12)
    assert not np.allclose(ssdc[0], ssdc[1]) and not np.allclose(single[0]["probe"], single[1]["probe"])  # draws differ


def test_lenses_need_what_the_model_and_data_allow(evalset, micro):
    from peanchor.models.vit import VisionTransformer

    class NoWeights(VisionTransformer):
        """A model that declares it hands out no attention weights (e.g. a foreign model)."""

        has_attention_weights = False

        def forward_intermediates(self, x, intervention, *, layers=None, head=True, attention=None):
            assert attention is None  # never handed a sink: it does not say has_attention_weights
            return super().forward_intermediates(x, intervention, layers=layers, head=head)

    r = evaluate_model(NoWeights(micro("ape", num_classes=2).args), evalset, plan(alphas=(), batch_size=128),
                       info=INFO, device="cpu", progress=False)  # fmt: skip
    assert r.attention_distance is None and r.position_probe is not None
    single = EvalSet.from_tensors(evalset.images[:1], evalset.labels[:1], INFO)
    r = evaluate_model(micro("ape", num_classes=2), single, plan(alphas=(), batch_size=8), info=INFO, device="cpu", progress=False)
    assert r.position_probe is None and r.attention_distance is not None  # one image cannot be split


def test_a_pass_feeds_the_lenses_it_is_given(evalset, micro):
    """Full passes feed every lens the runner was given (the position probe only in order: under RPI it has a pass of
    its own); a truncated pass feeds SSDC alone; the lenses say what the model and the data allow."""
    from peanchor.analysis.evaluate import measured_lenses
    from peanchor.analysis.passes import PassSpec

    model = micro("ape", num_classes=2)
    settings = {"seed": 0, "probe_ridge": DEFAULT_RIDGE, "probe_holdout": DEFAULT_HOLDOUT}
    lenses = measured_lenses(model, len(evalset), settings)
    assert {"ssdc", "attention_distance", "position_probe"} <= set(lenses)  # and any lens registered since
    assert int(lenses["position_probe"].heldout.sum()) == len(evalset) // 2
    only_ssdc = measured_lenses(model, len(evalset), settings, chosen=())
    assert list(only_ssdc) == ["ssdc"]  # required: always measured
    runner = PassRunner(model, evalset, INFO.mean, INFO.std, batch_size=128, device=torch.device("cpu"), seed=0,
                        bar=None, lenses=lenses)  # fmt: skip
    full = runner.run(PassSpec(None, 1.0, "all", None))
    assert set(full.states) == set(lenses) and full.correct is not None
    assert full.states["position_probe"].num_images == (len(evalset) - len(evalset) // 2, len(evalset) // 2)
    first2 = runner.run(PassSpec(None, 0.5, "first2", 0))
    assert list(first2.states) == ["ssdc"] and first2.correct is None
    assert first2.states["ssdc"].compute().shape == (2,)


def test_bad_probe_settings_are_user_errors(evalset, micro):
    from peanchor.core.errors import ConfigError

    for kwargs in ({"probe_ridge": 0.0}, {"probe_ridge": float("inf")}, {"probe_holdout": 1.0}, {"probe_holdout": 0}):
        with pytest.raises(ConfigError, match=f"analysis.{next(iter(kwargs))}="):
            plan(alphas=(), **kwargs)


def test_the_plans_probe_defaults_are_the_probes_and_are_recorded():
    settings = plan().settings_record("fingerprint", "cpu")
    assert (settings.probe_ridge, settings.probe_holdout) == (DEFAULT_RIDGE, DEFAULT_HOLDOUT)
