"""The package's code keeps a readable shape: no class over 200 lines, no function or method over
60, in Python (measured with ast) and in the JVM helper's Java (measured by a brace-depth scan).
Fast: reads the sources, imports nothing of the package."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "plugins" / "hive_compaction"
MAX_CLASS = 200
MAX_FUNCTION = 60


def python_blocks(path: Path) -> list[tuple[str, str, int]]:
    """(kind, qualified name, lines) of every class and function of a Python file, nested ones too."""
    out = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                kind = "class" if isinstance(child, ast.ClassDef) else "function"
                name = f"{prefix}{child.name}"
                out.append((kind, name, child.end_lineno - child.lineno + 1))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), "")
    return out


# Comments, string and character literals: blanked (newlines kept) before braces are counted.
_NOISE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
_CLASS = re.compile(r"\b(?:class|interface|enum)\s+(\w+)")
_METHOD = re.compile(r"(\w+)\s*\([^()]*\)\s*(?:throws\s+[\w.,\s]+)?$")


def java_blocks(path: Path) -> list[tuple[str, str, int]]:
    """(kind, qualified name, lines) of every class and method of a Java file: each ``{`` is named
    by the text since the previous ``;``, ``{`` or ``}``: a class declaration, or (directly in
    a class body) a method's or constructor's signature; other blocks are neither."""
    text = _NOISE.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), path.read_text(encoding="utf-8"))
    out, stack, head, line = [], [], [], 1  # stack: (kind, name, first line) of each open block
    for ch in text:
        if ch == "{":
            before = "".join(head).strip()
            in_class = bool(stack) and stack[-1][0] == "class"
            prefix = next((n for k, n, _ in reversed(stack) if k == "class"), "")
            found = _CLASS.search(before)
            method = _METHOD.search(before) if in_class and not found else None
            if found:
                stack.append(("class", f"{prefix}.{found.group(1)}" if prefix else found.group(1), line))
            elif method and method.group(1) not in ("if", "for", "while", "switch", "catch", "synchronized"):
                stack.append(("method", f"{prefix}.{method.group(1)}", line))
            else:
                stack.append(("block", "", line))
            head = []
        elif ch == "}":
            kind, name, first = stack.pop()
            if kind != "block":
                out.append(("class" if kind == "class" else "function", name, line - first + 1))
            head = []
        elif ch == ";":
            head = []
        else:
            head.append(ch)
        line += ch == "\n"
    return out


def oversized() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*")):
        if "__pycache__" in path.parts or path.suffix not in (".py", ".java"):
            continue
        blocks = python_blocks(path) if path.suffix == ".py" else java_blocks(path)
        for kind, name, lines in blocks:
            limit = MAX_CLASS if kind == "class" else MAX_FUNCTION
            if lines > limit:
                found.append(f"{path.relative_to(PACKAGE)}: {kind} {name} is {lines} lines (limit {limit})")
    return found


def test_no_class_over_200_lines_and_no_function_over_60():
    found = oversized()
    assert not found, "split these along their seams:\n" + "\n".join(found)


def test_the_java_scan_measures_classes_and_methods(tmp_path):
    source = tmp_path / "Sample.java"
    source.write_text("""// a comment with a brace {
public class Sample {
    private static final String BRACE = "}";
    public static class Inner extends java.io.IOException {
        Inner(String m) { super(m); }
    }
    /** Javadoc { */
    public int work(java.util.List items) throws java.io.IOException {
        for (int i = 0; i < 3; i++) {
            if (i > 1) { return i; }
        }
        java.util.Comparator c = new java.util.Comparator() {
            public int compare(Object a, Object b) { return 0; }
        };
        return '{' == '}' ? 1 : 0;
    }
}
""")
    assert sorted(java_blocks(source)) == sorted(
        [
            ("function", "Sample.Inner.Inner", 1),
            ("class", "Sample.Inner", 3),
            ("function", "Sample.work", 9),
            ("class", "Sample", 16),
        ]
    )


def test_the_python_scan_names_nested_functions(tmp_path):
    source = tmp_path / "sample.py"
    source.write_text("class A:\n    def f(self):\n        def g():\n            pass\n        return g\n")
    assert python_blocks(source) == [("class", "A", 5), ("function", "A.f", 4), ("function", "A.f.g", 2)]
