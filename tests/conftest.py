"""Shared test setup."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    """Tiny models are dominated by per-op overhead, which intra-op threads only add to (badly so on a
    busy 2-core CI machine). Subprocess tests set their own environment."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def fit_briefly():
    """``fit(model, images uint8 (n, 3, S, S), labels, info, steps=40)``: a few AdamW steps on random batches of
    64, returning the model in eval mode (tests that need a model trained above chance, in seconds)."""
    from peanchor.data import normalize

    def fit(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor, info, steps: int = 40,
            seed: int = 0) -> torch.nn.Module:  # fmt: skip
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        g = torch.Generator().manual_seed(seed)
        for _ in range(steps):
            idx = torch.randint(0, len(labels), (64,), generator=g)
            loss = torch.nn.functional.cross_entropy(model(normalize(images[idx], info.mean, info.std)), labels[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        return model.eval()

    return fit
