"""Every veRL and Ray citation on the site, and whether it resolves in the installed packages.

The forms a page may use are listed in README.md, "Citing veRL and Ray":

* a veRL path, ``verl/trainer/main_ppo.py`` or ``verl/workers/engine/fsdp/``, bare or as a
  link at the release tag (``https://github.com/verl-project/verl/blob/v0.9.1/...``);
* the symbols that path defines, in backticks inside parentheses right after it:
  ``verl/trainer/main_ppo.py`` (``TaskRunnerV1``, ``run_ppo``);
* a veRL module in dotted form, ``verl.single_controller.ray.base`` (optionally followed by
  attributes, ``verl.protocol.DataProto``);
* Ray's Python files as repository paths, ``python/ray/_private/worker.py`` (``init``);
* Ray's C++ files only as links at the 2.60.0 release commit (the wheel ships no C++).

A path resolves if the file exists in the installed package; a symbol if the file defines
it at module level (a class, a function or an assignment; in an ``__init__.py`` an import
too), or, for ``Class.name``, if the class body defines ``name``, assigns ``self.name``, or
registers it with ``Class.register("name")`` (veRL's ``DynamicEnum``, e.g.
``Dispatch.ONE_TO_ALL``). Files are parsed, never imported: citing a module must not run it.

Files in veRL's repository that the wheel does not ship (examples, docs, the job runtime env)
cannot be checked here; they are listed in ``REPO_ONLY`` with where they were checked.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

VERL_TAG = "v0.9.1"
RAY_COMMIT = "b7f4259e944bf6959f721b106adc366ddfa0c356"  # ray.__commit__ of the 2.60.0 wheel
# Old pins that must not come back: the handbook explains veRL 0.9.1.
RETIRED_PINS = ("b178a3cd",)

# In veRL's git repository but not in the 0.9.1 wheel, so not checkable against the installed
# package. Each was checked in the repository (tags v0.9.0 and main of 2026-08-23, the newest
# snapshot the project's source index holds; 0.9.1 was tagged after it).
REPO_ONLY = {
    "verl/trainer/runtime_env.yaml",
    "examples/tutorial/slurm/ray_on_slurm.slurm",
    "examples/tutorial/ray/tutorial.ipynb",
    "examples/data_preprocess/gsm8k.py",
    "docs/start/multinode.rst",
}

BACKTICKED = r"`+\s*([^`]+?)\s*`+"
# A path token: starts a word, runs over path characters; braces expand ({fsdp,megatron}).
VERL_PATH = re.compile(r"(?<!\]\()(?<![A-Za-z0-9_/.{-])verl/[A-Za-z0-9_/.{},*-]*")
RAY_PY_PATH = re.compile(r"(?<![A-Za-z0-9_/.-])python/ray/[A-Za-z0-9_/.-]*")
RAY_CPP_PATH = re.compile(r"(?<![A-Za-z0-9_/.-])src/ray/[A-Za-z0-9_/.-]*")
VERL_DOTTED = re.compile(r"(?<![A-Za-z0-9_./-])verl(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
VERL_LINK = re.compile(
    r"https://github\.com/(?:verl-project|volcengine)/verl/(?:blob|tree)/([^/\s)]+)/([^\s)#>\"']*)"
)
RAY_LINK = re.compile(
    r"https://github\.com/ray-project/ray/(?:blob|tree)/([^/\s)]+)/([^\s)#>\"']*)"
)
# The symbol list right after a cited path: "(`A`, `B.c`)", also with Chinese punctuation.
SYMBOLS = re.compile(r"^`*\)?\s*[(（]((?:\s*" + BACKTICKED + r"\s*[,，、]?)+)\s*[)）]")
# Sources the wheel does not ship: Cython compiled into _raylet.so, and C++.
COMPILED = (".pyx", ".pxd", ".pxi")
CPP = (*COMPILED, ".cc", ".h", ".proto", "/")
LINE_NUMBER = re.compile(r"^(:\d+|#L\d+)")
IDENTIFIER = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


@dataclass(frozen=True)
class Citation:
    """One cited path or symbol, where it was cited, and what it must resolve to."""

    source: Path  # the page or module citing it
    line: int
    upstream: str  # "verl" or "ray"
    kind: str  # "path", "symbol", "module", "link"
    text: str  # as cited
    problem: str | None  # None if it resolves

    def where(self) -> str:
        return f"{self.source.relative_to(REPO)}:{self.line}"


@functools.cache
def package_root(name: str) -> Path:
    """The installed package's directory, e.g. .../site-packages/verl."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"{name} is not installed: nox -s upstream installs it")
    return Path(next(iter(spec.submodule_search_locations)))


@functools.cache
def definitions(path: Path) -> tuple[set[str], dict[str, set[str]]]:
    """Module-level names defined in ``path``, and for each class the names it defines."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top: set[str] = set()
    members: dict[str, set[str]] = {}
    is_init = path.name == "__init__.py"
    for node in tree.body:
        top |= bound_names(node)
        if is_init and isinstance(node, ast.ImportFrom | ast.Import):
            top.update((a.asname or a.name).split(".")[0] for a in node.names)
        if isinstance(node, ast.ClassDef):
            members[node.name] = class_members(node)
    # DynamicEnum members: Dispatch.register("ONE_TO_ALL") anywhere in the file.
    for call in ast.walk(tree):
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "register"
            and isinstance(call.func.value, ast.Name)
            and call.args
            and isinstance(call.args[0], ast.Constant)
        ):
            members.setdefault(call.func.value.id, set()).add(str(call.args[0].value))
    return top, members


def bound_names(statement: ast.stmt) -> set[str]:
    """The names a statement defines: a class, a function, the targets of an assignment, and
    those of the statements inside a `with`, `if` or `try`."""
    if isinstance(statement, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
        return {statement.name}
    if isinstance(statement, ast.Assign):
        return {t.id for t in statement.targets if isinstance(t, ast.Name)}
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
        return {statement.target.id}
    # A module-level `with`, `if` or `try` binds its body's names at module scope too
    # (veRL's `__version__` is read inside `with open(...)`).
    if isinstance(statement, ast.With):
        bodies = [statement.body]
    elif isinstance(statement, ast.If):
        bodies = [statement.body, statement.orelse]
    elif isinstance(statement, ast.Try):
        bodies = [statement.body, statement.orelse, statement.finalbody]
        bodies += [handler.body for handler in statement.handlers]
    else:
        return set()
    return {name for body in bodies for sub in body for name in bound_names(sub)}


def class_members(node: ast.ClassDef) -> set[str]:
    names: set[str] = set()
    for item in node.body:
        names |= bound_names(item)
    for sub in ast.walk(node):  # self.name = ... in any method
        if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store):
            if isinstance(sub.value, ast.Name) and sub.value.id == "self":
                names.add(sub.attr)
    return names


def module_file(root: Path, parts: list[str]) -> Path | None:
    """``verl/a/b`` as a file: ``a/b.py`` or ``a/b/__init__.py`` under the package root."""
    base = root.parent.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def symbol_problem(file: Path, symbol: str) -> str | None:
    """None if ``file`` defines ``symbol`` (``Name`` or ``Class.member``), else why not."""
    top, members = definitions(file)
    head, _, rest = symbol.partition(".")
    if head not in top:
        return f"`{symbol}`: {file.name} defines no `{head}`"
    if rest and rest.split(".")[0] not in members.get(head, set()):
        return f"`{symbol}`: class `{head}` in {file.name} defines no `{rest}`"
    return None


def expand_braces(token: str) -> list[str]:
    """``verl/workers/engine/{fsdp,megatron}/`` -> the two paths."""
    match = re.search(r"\{([^{}]*)\}", token)
    if not match:
        return [token]
    head, tail = token[: match.start()], token[match.end() :]
    return [p for alt in match[1].split(",") for p in expand_braces(head + alt.strip() + tail)]


def path_problem(package: str, path: str) -> tuple[Path | None, str | None]:
    """Resolve a repository path of veRL (``verl/...``) or Ray (``python/ray/...``)."""
    if path in REPO_ONLY:
        return None, None
    relative = path.removeprefix("python/")  # Ray's repo keeps its package under python/
    target = package_root(package).parent / relative.rstrip("/")
    if "*" in relative:
        return None, None if list(package_root(package).parent.glob(relative)) else "no match"
    if path.endswith("/"):
        ok = target.is_dir()
    else:
        ok = target.exists()
    if not ok:
        return None, f"`{path}` does not exist in the installed {package}"
    return (target if target.suffix == ".py" else None), None


def cited_symbols(after: str) -> list[str]:
    match = SYMBOLS.match(after)
    if not match:
        return []
    names = re.findall(BACKTICKED, match[1])
    return [n.removesuffix("()") for n in names if IDENTIFIER.fullmatch(n.removesuffix("()"))]


def scan_text(source: Path, text: str) -> list[Citation]:
    """Every citation in ``text`` (a page, a notebook's cells or a module), in order."""
    found: list[Citation] = []
    linked_spans: list[tuple[int, int]] = []

    def line_of(offset: int) -> int:
        return text.count("\n", 0, offset) + 1

    def add(offset, upstream, kind, cited, problem):
        found.append(Citation(source, line_of(offset), upstream, kind, cited, problem))

    def check_path(offset: int, end: int, package: str, upstream: str, token: str) -> None:
        token = token.rstrip(".,;:)")
        if LINE_NUMBER.match(text[offset + len(token) : offset + len(token) + 6]):
            add(offset, upstream, "path", token, f"`{token}` cites a line number: cite symbols")
            return
        for path in expand_braces(token):
            file, problem = path_problem(package, path)
            add(offset, upstream, "path", path, problem)
            if file is None or problem:
                continue
            for symbol in cited_symbols(text[offset + len(token) :]):
                add(offset, upstream, "symbol", f"{path} ({symbol})", symbol_problem(file, symbol))

    for match in VERL_LINK.finditer(text):
        ref, path = match[1], match[2]
        linked_spans.append(match.span())
        if ref != VERL_TAG:
            add(match.start(), "verl", "link", match[0], f"links veRL at {ref!r}, not {VERL_TAG}")
        elif path:
            check_path(match.start(2), match.end(), "verl", "verl", path)
    for match in RAY_LINK.finditer(text):
        ref, path = match[1], match[2]
        linked_spans.append(match.span())
        if ref != RAY_COMMIT:
            add(match.start(), "ray", "link", match[0], f"links Ray at {ref!r}, not {RAY_COMMIT}")
        elif path.startswith("python/") and not path.endswith(COMPILED):
            check_path(match.start(2), match.end(), "ray", "ray", path)
        else:
            add(match.start(), "ray", "link", path, None)  # C++: the link's form is the check

    def inside_link(offset: int) -> bool:
        return any(start <= offset < end for start, end in linked_spans)

    for match in VERL_PATH.finditer(text):
        if not inside_link(match.start()) and match[0].rstrip("/") != "verl":
            check_path(match.start(), match.end(), "verl", "verl", match[0])
    for match in RAY_PY_PATH.finditer(text):
        if not inside_link(match.start()) and not match[0].endswith(COMPILED):
            check_path(match.start(), match.end(), "ray", "ray", match[0])
    for match in [*RAY_CPP_PATH.finditer(text), *RAY_PY_PATH.finditer(text)]:
        if not inside_link(match.start()) and match[0].endswith(CPP):
            add(
                match.start(),
                "ray",
                "path",
                match[0],
                f"`{match[0]}`: cite Ray's C++ as a link at the release commit "
                f"(https://github.com/ray-project/ray/blob/{RAY_COMMIT}/{match[0]})",
            )
    for match in VERL_DOTTED.finditer(text):
        parts = match[0].split(".")
        for cut in range(len(parts), 0, -1):  # the longest prefix that is a module
            file = module_file(package_root("verl"), parts[:cut])
            if file is not None:
                rest = ".".join(parts[cut:])
                problem = symbol_problem(file, rest) if rest else None
                add(match.start(), "verl", "module", match[0], problem)
                break
        else:
            add(match.start(), "verl", "module", match[0], f"`{match[0]}` is no veRL module")
    for pin in RETIRED_PINS:
        for match in re.finditer(pin, text):
            add(match.start(), "verl", "pin", pin, f"cites veRL at {pin}; cite veRL {VERL_TAG}")
    return sorted(found, key=lambda c: c.line)


def text_of(source: Path) -> str:
    """A page's text; a notebook's cells joined (lines then count within the joined text)."""
    raw = source.read_text(encoding="utf-8")
    if source.suffix != ".ipynb":
        return raw
    cells = json.loads(raw)["cells"]
    return "\n".join("".join(c["source"]) for c in cells)


def cited_sources() -> list[Path]:
    """Pages and notebooks of the site (both languages), and reference_impl's modules."""
    pages = sorted((REPO / "docs").rglob("*.md"))
    notebooks = sorted((REPO / "examples").glob("*.ipynb"))
    modules = sorted((REPO / "reference_impl").rglob("*.py"))
    return [*pages, *notebooks, *modules]


def language(source: Path) -> str:
    if source.suffix == ".py":
        return "reference_impl"
    return "zh" if ".zh." in source.name else "en"


def scan(source: Path) -> list[Citation]:
    return scan_text(source, text_of(source))
