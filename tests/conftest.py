"""Shared test setup."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import gc
import sys

import pytest
from _pytest.doctest import DoctestModule

# The modules this run imports from here on (the test files, rewritten for pytest's assertions, and peanchor) keep
# their compiled form between runs even where PYTHONDONTWRITEBYTECODE is set: every xdist worker of the development
# loop otherwise compiles them again, seconds each. The cache sits in __pycache__ folders, which git ignores.
sys.dont_write_bytecode = False


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> Iterator[list[pytest.Collector]]:
    """``--doctest-modules`` (pyproject.toml) is for peanchor/'s docstrings: a test file holds no doctest, and
    searching each one's objects for them cost every xdist worker seconds of its collection."""
    collectors = yield
    return [c for c in collectors if not isinstance(c, DoctestModule)]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Everything imported by now (torch, timm, transformers, the test modules) lives for the whole run: moved out of
    the collector's reach, it is no longer walked by every full collection during the tests, nor by the five that
    pytest runs at the session's end (about two seconds a worker). Garbage made later is collected as before."""
    gc.collect()
    gc.freeze()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The same at the end, before pytest's own five full collections (which look for exceptions raised in
    finalizers): one collection here runs every finalizer of the garbage left (its exceptions still reach pytest's
    hook), and what is still alive after it is no longer walked five times."""
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    """Tiny models are dominated by per-op overhead, which intra-op threads only add to (badly so on a
    busy 2-core CI machine). Subprocess tests set their own environment."""
    import torch  # here, not at the top: xdist's controller loads this file and never needs torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def private_cache(tmp_path, monkeypatch) -> None:
    """Never touch the user's ~/.cache: ``PEANCHOR_CACHE`` is this test's own folder (a file whose tests all want it
    says ``pytestmark = pytest.mark.usefixtures("private_cache")``)."""
    monkeypatch.setenv("PEANCHOR_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One scenes cache for the runs of the whole session (the session's base temp folder), so that the tiny splits
    are generated once; what a test gives as ``PEANCHOR_CACHE`` to its runs and subprocesses."""
    path = tmp_path_factory.getbasetemp() / "peanchor-cache"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture
def in_process(cache: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """In-process runs of the command line: the shared scenes ``cache`` and one thread, restored after."""
    import torch

    monkeypatch.setenv("PEANCHOR_CACHE", str(cache))
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def micro():
    """``micro(pe, seed=0, num_classes=5, **kw)``: a ``vit_micro`` with PE ``pe`` in eval mode, built right after
    ``torch.manual_seed(seed)`` (so the same arguments give the same weights); ``kw`` go to ``create_model``
    (``img_size``, ``patch_size``, ``pe_kwargs``, ...)."""
    import torch

    from peanchor.models import create_model

    def build(pe: str, seed: int = 0, num_classes: int = 5, **kw) -> torch.nn.Module:
        torch.manual_seed(seed)
        return create_model("vit_micro", pe=pe, num_classes=num_classes, **kw).eval()

    return build


@pytest.fixture(scope="session")
def fit_briefly():
    """``fit(model, images uint8 (n, 3, S, S), labels, info, steps=40)``: a few AdamW steps on random batches of
    64, returning the model in eval mode (tests that need a model trained above chance, in seconds)."""
    import torch

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


@pytest.fixture(scope="session")
def photos():
    """``photos(size)``: four crops of a real photograph (matplotlib's ``grace_hopper.jpg``), resized to ``size`` px
    with Pillow's bicubic filter, as uint8 ``(4, 3, size, size)``: the images the shifts are checked on."""
    import matplotlib.cbook
    import numpy as np
    import torch
    from PIL import Image

    photo = Image.open(matplotlib.cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)).convert("RGB")
    boxes = [(0, 0, 512, 512), (0, 88, 512, 600), (100, 150, 400, 450), (200, 300, 456, 556)]  # (512, 600) photo

    def load(size: int) -> torch.Tensor:
        crops = [np.asarray(photo.crop(box).resize((size, size), Image.BICUBIC)) for box in boxes]  # (S, S, 3) each
        return torch.from_numpy(np.stack(crops)).permute(0, 3, 1, 2).contiguous()  # (4, 3, S, S)

    return load
