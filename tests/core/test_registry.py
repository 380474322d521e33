"""peanchor.core.registry: one Registry type behind every plug-in family: one decorator, live names, one-line refusals and
lookups, entry-point discovery, PEANCHOR_PLUGINS and --plugin (the example package's end-to-end runs:
tests/project/test_plugin_package.py)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import peanchor
from peanchor.core import registry as R
from peanchor.analysis.shifts import SEVERITY_TABLES, SHIFT_KINDS, SHIFT_PARAMS
from peanchor.analysis.shifts.base import KINDS, Param, ShiftKind, register
from peanchor.cli import main, plugin_modules
from peanchor.settings.conditions import parse_condition
from peanchor.core.errors import ConfigError
from peanchor.lenses import LENS_NAMES, LENSES, RESERVED
from peanchor.pe import PE_NAMES, PE_REGISTRY, PositionalEncoding, register_pe
from peanchor.presets.catalog import PRESET_NAMES, PRESETS, get_preset, register_preset
from peanchor.results.records import AnalysisResult, ModelResult


class Shape:
    def __init__(self, name: str) -> None:
        self.name = name


def test_one_decorator_live_names_and_one_line_refusals():
    shapes: R.Registry[object] = R.Registry("shape", "peanchor.test-shapes", reserved=("settings",))
    names = R.NamesView(shapes)
    assert names == () and "square" not in names

    @shapes.register
    class Square:
        name = "square"

    assert names == ("square",) and list(names) == ["square"] and names[0] == "square" and len(names) == 1
    circle = shapes.register(Shape("circle"))  # an object, not a class: the same call
    assert shapes.lookup("circle") is circle and names == ("square", "circle")
    did_you_mean = r"^unknown shape 'sqaure' \(did you mean 'square'\?\); valid: square, circle$"
    with pytest.raises(ConfigError, match=did_you_mean):
        shapes.lookup("sqaure")
    with pytest.raises(ConfigError, match=r"^unknown shape 'zzz'; valid: square, circle$"):
        shapes.lookup("zzz")
    with pytest.raises(ConfigError, match="a shape named 'square' is already registered"):
        shapes.register(Shape("square"))
    with pytest.raises(ConfigError, match="'settings' cannot name a shape: the result files use it"):
        shapes.register(Shape("settings"))
    with pytest.raises(ConfigError, match="not an identifier"):
        shapes.register(Shape("two words"))
    assert shapes.register(Square) is Square  # the same object again is a no-op (a module imported twice)
    named = shapes.register(name="triangle")(type("Triangle", (), {}))
    assert named.name == "triangle" and shapes["triangle"] is named
    del shapes["triangle"]
    assert names == ("square", "circle")


def test_a_lazy_name_is_listed_at_once_and_imported_at_its_first_lookup(tmp_path, monkeypatch):
    (tmp_path / "lazy_shapes.py").write_text("from tests.core.test_registry import LAZY\n\n\n@LAZY.register\nclass Hexagon:\n"
                                             "    name = 'hexagon'\n\n\nclass Star:\n    name = 'star'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lazy_shapes", raising=False)
    LAZY.register_lazy("hexagon", "lazy_shapes")
    LAZY.register_lazy("star", "lazy_shapes:Star")  # a class its module does not register: registered at lookup
    LAZY.register_lazy("ghost", "lazy_shapes")  # importing the module does not register it
    assert LAZY.names() == ("hexagon", "star", "ghost") and "lazy_shapes" not in sys.modules
    assert LAZY.lookup("hexagon").__module__ == "lazy_shapes" and LAZY["star"].name == "star"
    with pytest.raises(ConfigError, match="^importing lazy_shapes did not register the shape 'ghost'$"):
        LAZY.lookup("ghost")
    with pytest.raises(ConfigError, match="'star' is already registered"):
        LAZY.register(Shape("star"))  # another object may not take a lazy name either
    LAZY.register_lazy("broken", "no_such_module_here")
    with pytest.raises(ConfigError, match="plug-in 'no_such_module_here' .* failed to load: ModuleNotFoundError"):
        LAZY.lookup("broken")


#: The registry of the lazy test's module (it imports this one).
LAZY: R.Registry[object] = R.Registry("shape", "peanchor.test-lazy-shapes")


def test_an_object_without_a_name_is_registered_with_one_and_a_family_may_read_another_attribute():
    sizes: R.Registry[dict] = R.Registry("size", "peanchor.test-sizes")
    size = {"depth": 2}
    assert sizes.register(size, name="tiny") is size and sizes["tiny"] is size
    with pytest.raises(ConfigError, match="says its name is 'square', not 'round'"):
        sizes.register(Shape("square"), name="round")
    kinds: R.Registry[type] = R.Registry("kind", "peanchor.test-kinds", name_attribute="kind")

    @kinds.register
    class Zero:
        kind = "zero"

    assert kinds.names() == ("zero",) and kinds.declared_names() == ("zero",)


def test_the_order_a_registry_keeps():
    ordered: R.Registry[Shape] = R.Registry("shape", "peanchor.test-shapes", order=lambda s: s.name)
    for name in ("b", "c", "a"):
        ordered.register(Shape(name))
    assert ordered.names() == ("a", "b", "c")


def test_every_family_is_a_registry_and_its_names_are_live(monkeypatch):
    from peanchor.audit import CHECKS
    from peanchor.data import DATASETS
    from peanchor.interventions import INTERVENTIONS
    from peanchor.models import MODEL_SIZES

    for family in (PE_REGISTRY, KINDS, LENSES, PRESETS, INTERVENTIONS, DATASETS, MODEL_SIZES, CHECKS):
        assert isinstance(family, R.Registry) and family.group in R.GROUPS

    @register_pe
    class Shuffled(PositionalEncoding):
        name = "test_live_pe"

    @register
    class Dim(ShiftKind):
        name = "test_dim"
        summary = "darker"
        params = (Param("level", float, ">= 0", lambda v: v >= 0, True),)
        table_params = ("level",)
        tables = {"cifar-10-c": (1, 2, 3, 4, 5)}

    preset = register_preset(dataclasses.replace(get_preset("smoke"), name="test_preset"))
    try:
        assert "test_live_pe" in PE_NAMES and parse_condition("test_live_pe-rpt").pe == "test_live_pe"
        assert "test_dim" in SHIFT_KINDS and SHIFT_PARAMS["test_dim"] == ("level",)
        assert SEVERITY_TABLES["cifar-10-c"]["test_dim"] == (1, 2, 3, 4, 5)
        assert "test_preset" in PRESET_NAMES and get_preset("test_preset") is preset
        assert peanchor.LENSES == LENS_NAMES == tuple(LENSES) and isinstance(peanchor.PE_NAMES, R.NamesView)
    finally:
        del PE_REGISTRY["test_live_pe"], KINDS["test_dim"], PRESETS["test_preset"]
    assert "test_live_pe" not in PE_NAMES and "test_dim" not in SHIFT_KINDS and "test_dim" not in SHIFT_PARAMS
    with pytest.raises(ConfigError, match=r"unknown condition 'test_live_pe'; expected a positional encoding \(none"):
        parse_condition("test_live_pe")


def test_a_lens_may_not_take_a_name_the_result_files_use():
    """RESERVED is every key of analysis.json and of a model in results.json that is not a lens record."""
    keys = {f.name for cls in (AnalysisResult, ModelResult) for f in dataclasses.fields(cls)}
    assert keys | {"schema", "schema_version", "lenses"} <= set(RESERVED)
    assert LENSES.reserved == frozenset(RESERVED)

    from tests.lenses.test_registry import TokenNorm

    class Settings(TokenNorm):
        name = "settings"

    with pytest.raises(ConfigError, match="^'settings' cannot name a lens: the result files use it"):
        LENSES.register(Settings)
    assert "settings" not in LENSES


def _dist(root: Path, name: str, entry_points: str, modules: dict[str, str]) -> None:
    """A hand-written installed distribution: ``<name>.dist-info`` (METADATA, entry_points.txt) and its modules."""
    info = root / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    for module, code in modules.items():
        (root / f"{module}.py").write_text(textwrap.dedent(code))


def test_installed_plug_ins_are_found_through_their_entry_points(tmp_path, monkeypatch):
    _dist(tmp_path, "shapes_plugin", """
        [peanchor.test-shapes]
        hexagon = shapes_hexagon
        octagon = shapes_octagon:OCTAGON
    """, {
        "shapes_hexagon": "from tests.core.test_registry import SHAPES, Shape\nSHAPES.register(Shape('hexagon'))\n",
        # not registered by its module: the entry point names the object, and loading it registers it
        "shapes_octagon": "from tests.core.test_registry import Shape\nOCTAGON = Shape('octagon')\n",
    })  # fmt: skip
    monkeypatch.syspath_prepend(str(tmp_path))
    global SHAPES
    SHAPES = R.Registry("shape", "peanchor.test-shapes")
    try:
        SHAPES.register(Shape("square"))
        assert SHAPES.names() == ("square", "hexagon", "octagon")  # the first read loads the group, once
        assert SHAPES.lookup("octagon").name == "octagon"
    finally:
        for module in ("shapes_hexagon", "shapes_octagon"):
            sys.modules.pop(module, None)


def test_the_entry_points_are_read_once_and_again_after_an_install(tmp_path, monkeypatch):
    """Read once per state of the import path (every command line reads several groups): a distribution installed
    into a folder already on the path, after a first read, is seen at the next one, as importlib.metadata sees it."""
    from importlib.metadata import entry_points

    monkeypatch.syspath_prepend(str(tmp_path))
    assert R.entry_point_names("peanchor.test-later") == ()
    _dist(tmp_path, "later_plugin", "[peanchor.test-later]\ntriangle = later_module\n", {})
    assert R.entry_point_names("peanchor.test-later") == ("triangle",)
    assert R.installed_entry_points("peanchor.test-later") == tuple(entry_points(group="peanchor.test-later"))
    assert R.installed_entry_points("peanchor.test-later") is R.installed_entry_points("peanchor.test-later")


def test_a_broken_plug_in_is_one_line_naming_it(tmp_path, monkeypatch):
    _dist(tmp_path, "broken_plugin", "[peanchor.test-broken]\nbad = broken_module\n",
          {"broken_module": "raise RuntimeError('no GPU here')\n"})  # fmt: skip
    monkeypatch.syspath_prepend(str(tmp_path))
    broken: R.Registry[object] = R.Registry("shape", "peanchor.test-broken")
    with pytest.raises(ConfigError, match=r"^plug-in broken_plugin entry point bad = broken_module "
                       r"\(peanchor.test-broken\) failed to load: RuntimeError: no GPU here$"):  # fmt: skip
        broken.names()
    with pytest.raises(ConfigError, match="failed to load"):
        broken.names()  # at every read: a broken plug-in is never a silent absence
    with pytest.raises(ConfigError, match=r"^plug-in 'no_such_module' \(--plugin\) failed to load: ModuleNotFound"):
        R.load_plugins(["no_such_module"])
    with pytest.raises(ConfigError, match="expected a module name"):
        R.load_plugins(["not a module"])


def test_plugins_from_the_environment_and_for_workers(tmp_path, monkeypatch):
    (tmp_path / "env_plugin.py").write_text("LOADED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(R.PLUGINS_ENV, " env_plugin, ,")
    assert R.plugins_from_env() == ("env_plugin",)
    fresh: R.Registry[object] = R.Registry("shape", "peanchor.test-none")
    try:
        assert fresh.names() == () and sys.modules["env_plugin"].LOADED
        assert "env_plugin" not in R.loaded_plugins()  # the environment's reach the workers by themselves
        monkeypatch.setattr(R, "_LOADED", ["cli_plugin"])  # as --plugin cli_plugin leaves it
        with R.plugins_in_environment():  # what a spawned worker inherits
            import os

            assert os.environ[R.PLUGINS_ENV] == "env_plugin,cli_plugin"
        assert R.plugins_from_env() == ("env_plugin",)
    finally:
        sys.modules.pop("env_plugin", None)
    assert plugin_modules(["analyze", "R", "--plugin", "a.b", "--plugin=c", "--", "--plugin", "d"]) == ["a.b", "c"]


def test_the_command_line_loads_plug_ins_first_and_stays_light(tmp_path, capsys):
    """--plugin on any command, before the parser: the plug-in's shift is in the help and parsed; a missing module
    is one line. Building the parser still imports neither torch nor pydantic."""
    (tmp_path / "cli_shift.py").write_text(textwrap.dedent("""
        from peanchor.analysis.shifts.base import Param, ShiftKind, register

        @register
        class Fade(ShiftKind):
            name = "test_fade"
            summary = "fades"
            params = (Param("amount", float, "in [0, 1]", lambda v: 0 <= v <= 1, True, metavar="AMOUNT"),)
            table_params = ("amount",)
            tables = {}
    """))
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from peanchor.cli import main; "
            "rc = main(['--plugin', 'cli_shift', 'analyze', '--help']) if sys.argv[2] == 'help' else "
            "main(['report', '--plugin', 'no_such_plugin', 'OUT'])")  # fmt: skip
    help_run = subprocess.run([sys.executable, "-c", code, str(tmp_path), "help"], capture_output=True, text=True,
                              timeout=120)  # fmt: skip
    assert "test_fade:amount=AMOUNT" in help_run.stdout and "--plugin MODULE" in help_run.stdout
    assert "analysis.lenses.ssdc.{mode,metric,bootstrap}" in " ".join(help_run.stdout.split())  # --set's help
    bad = subprocess.run([sys.executable, "-c", code + "; sys.exit(rc)", str(tmp_path), "bad"], capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "peanchor: error: plug-in 'no_such_plugin' (--plugin) failed to load: ModuleNotFoundError: No module named "
        "'no_such_plugin'"]  # fmt: skip
    light = ("import sys, peanchor.cli; peanchor.cli.build_parser(); "
             "sys.exit(any(m.split('.')[0] in ('torch', 'pydantic') for m in sys.modules))")  # fmt: skip
    assert subprocess.run([sys.executable, "-c", light], timeout=120).returncode == 0
    assert main(["train", "--plugin", "no_such_plugin"]) == 2
    assert "no_such_plugin" in capsys.readouterr().err


def test_a_plug_in_package_loads_the_modules_it_declares(tmp_path, monkeypatch):
    """``--plugin PKG`` for a package whose plug-ins sit in submodules imports the ones its distribution declares;
    a package that declares none, or whose modules register nothing, is one line, never a silent no-op."""
    PE_REGISTRY.names()  # the PE family's entry points are read before this test's distribution is on the path
    pkg = tmp_path / "lab_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "shapes.py").write_text("from tests.core.test_registry import Shape\n"
                                   "from peanchor import registry\n"
                                   "registry.Registry('shape', 'peanchor.test-pkg').register(Shape('pentagon'))\n")
    (tmp_path / "quiet_pkg").mkdir()
    (tmp_path / "quiet_pkg" / "__init__.py").write_text("")
    _dist(tmp_path, "lab_pkg", "[peanchor.pes]\npentagon = lab_pkg.shapes\n", {})
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert R.declared_modules("lab_pkg") == ("lab_pkg.shapes",)
        assert R.declared_modules("quiet_pkg") == ()
        R.load_plugins(["lab_pkg"])
        assert "lab_pkg.shapes" in sys.modules
        with pytest.raises(ConfigError, match=r"^--plugin quiet_pkg: the package registered nothing: no installed "
                           r"distribution declares peanchor entry points"):  # fmt: skip
            R.load_plugins(["quiet_pkg"])
    finally:
        for module in ("lab_pkg", "lab_pkg.shapes", "quiet_pkg"):
            sys.modules.pop(module, None)
        R._LOADED[:] = [m for m in R._LOADED if m not in ("lab_pkg", "quiet_pkg")]  # in place: the list is shared
