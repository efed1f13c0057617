"""The library's layers import only downward (docs/architecture.md).

Every `import` in every module counts, including those inside functions, so
a lazy import cannot hide an upward edge or a loop. No TensorFlow needed:
the sources are parsed, not imported."""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Lowest first. A module may import its own layer and the layers below.
LAYERS = [
    ("ops", ["het_tf._op_library"]),
    ("runtime and data", ["het_tf.runtime", "het_tf.data"]),
    ("distribution", ["het_tf.distribute"]),
    ("keras", ["het_tf.keras_layers"]),
    # Dataset transforms and training steps around a model with the layer.
    ("pipeline and training", ["het_tf.pipeline", "het_tf.training"]),
    # The public modules gather names from the layers below for users.
    ("public API", ["het_tf", "het_tf.hybrid", "het_tf.cluster"]),
    ("models", ["het_tf.models"]),
    ("applications", ["het_tf.apps"]),
]

# Deprecated aliases of modules that moved up out of keras_layers/: each
# imports its new module. Delete them, and this list, in the next release.
DEPRECATED_ALIASES = {
    "het_tf.keras_layers.allocation": "het_tf.pipeline.allocation",
    "het_tf.keras_layers.hot_rows": "het_tf.pipeline.hot_rows",
    "het_tf.keras_layers.hybrid_training": "het_tf.training.hybrid_training",
    "het_tf.keras_layers.lookahead": "het_tf.pipeline.lookahead",
}


def module_files():
    """{module name: path} of the library: het_tf/ plus keras_layers/,
    which installs as het_tf.keras_layers."""
    out = {}
    for base, package in ((ROOT / "het_tf", "het_tf"), (ROOT / "keras_layers",
                                                        "het_tf.keras_layers")):
        for path in base.rglob("*.py"):
            rel = path.relative_to(base).with_suffix("")
            if "keras_layers" in rel.parts and base.name == "het_tf":
                continue  # a link to keras_layers/ in a development tree
            parts = [package, *rel.parts]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def layer_of(module):
    """Index in LAYERS of the most specific prefix that names `module`."""
    best, best_len = None, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            exact_only = prefix in ("het_tf", "het_tf.hybrid", "het_tf.cluster")
            if module == prefix or (not exact_only and module.startswith(prefix + ".")):
                if len(prefix) > best_len:
                    best, best_len = i, len(prefix)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS in {__file__}")
    return best


def imports_of(module, path, modules):
    """Library modules `module` imports, anywhere in its body."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: use absolute imports"
            base = node.module or ""
            # `from package import submodule` imports the submodule.
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                     for a in node.names]
        else:
            continue
        for name in names:
            if name == "het_tf" or name.startswith("het_tf."):
                while name not in modules:  # an attribute path: its module
                    name = name.rsplit(".", 1)[0]
                if name != module:
                    found.add(name)
    return found


def graph():
    modules = module_files()
    return {m: imports_of(m, p, modules) for m, p in modules.items()}


def test_every_module_imports_only_its_layer_and_below():
    upward = []
    for module, imported in sorted(graph().items()):
        for target in sorted(imported):
            if DEPRECATED_ALIASES.get(module) == target:
                continue
            if layer_of(target) > layer_of(module):
                upward.append(f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} "
                              f"({LAYERS[layer_of(target)][0]})")
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_no_import_loops():
    edges = graph()
    # A package's __init__ runs before its submodules, so `from package
    # import submodule` inside the package is not a loop through __init__.
    state, stack, loops = {}, [], []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for t in sorted(edges[m]):
            if state.get(t) == "open":
                loops.append(" -> ".join(stack[stack.index(t):] + [t]))
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = "done"

    for m in sorted(edges):
        if m not in state:
            visit(m)
    assert not loops, "import loops:\n" + "\n".join(loops)


def test_the_checker_sees_lazy_and_upward_imports(tmp_path):
    """The rule's own check: an import inside a function counts."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from het_tf.apps import train\n    import het_tf.hybrid\n")
    modules = module_files()
    found = imports_of("het_tf.runtime.table", probe, modules)
    assert found == {"het_tf.apps.train", "het_tf.hybrid"}
    assert layer_of("het_tf.apps.train") > layer_of("het_tf.runtime.table")
