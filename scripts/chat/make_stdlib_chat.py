#!/usr/bin/env python3
"""An instruction set every machine with Python has: the standard library's documented functions.

Each function with a docstring becomes one conversation: the user's turn gives the function's
signature and docstring and asks for its body; the assistant's turn is the body as the file has
it. One JSON Lines file is written per source file (`json.py` gives `json.jsonl`, `os/path.py`
is not a path: `os.path.jsonl`), so that `headroom prepare --chat` holds out whole files.

Usage: make_stdlib_chat.py OUT_DIR [--max-chars 1200] [--skip-dir NAME ...]
"""

import argparse
import ast
import json
import sys
import sysconfig
from pathlib import Path

SKIPPED = {"site-packages", "dist-packages", "test", "tests", "idlelib", "encodings"}
ASK = "Write the body of this function from Python's `{module}` module.\n\n```python\n{head}\n```"


def conversations(path: Path, module: str, max_chars: int):
    """The conversations of one source file's documented functions, in the file's order."""
    try:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
    except (UnicodeDecodeError, SyntaxError, ValueError):
        return
    lines = source.splitlines()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        doc = ast.get_docstring(node, clean=False)
        if not doc or len(node.body) < 2:
            continue
        first, after_doc = node.body[0], node.body[1]
        head = "\n".join(lines[node.lineno - 1 - len(node.decorator_list) : first.end_lineno])
        body = "\n".join(lines[after_doc.lineno - 1 : node.end_lineno])
        if not body.strip() or len(head) + len(body) > max_chars:
            continue
        if body.strip() in ("pass", "raise NotImplementedError", "raise NotImplementedError()"):
            continue
        head = dedent_like(head)
        body = dedent_like(body, head_indent=indent_of(lines[node.lineno - 1]))
        yield {
            "messages": [
                {"role": "user", "content": ASK.format(module=module, head=head)},
                {"role": "assistant", "content": f"```python\n{body}\n```"},
            ]
        }


def indent_of(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def dedent_like(text: str, head_indent: int | None = None) -> str:
    """`text` moved left so that its function's `def` starts at column 0."""
    lines = text.splitlines()
    cut = indent_of(lines[0]) if head_indent is None else head_indent
    return "\n".join(line[cut:] if line[:cut].strip() == "" else line for line in lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--max-chars", type=int, default=1200)
    parser.add_argument("--skip-dir", action="append", default=[])
    args = parser.parse_args()
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    skipped = SKIPPED | set(args.skip_dir)
    args.out.mkdir(parents=True, exist_ok=True)
    files = total = 0
    for path in sorted(stdlib.rglob("*.py")):
        relative = path.relative_to(stdlib)
        if skipped & set(relative.parts[:-1]):
            continue
        module = ".".join(relative.with_suffix("").parts).removesuffix(".__init__")
        found = list(conversations(path, module, args.max_chars))
        if not found:
            continue
        with open(args.out / f"{module}.jsonl", "w", encoding="utf-8") as out:
            for conversation in found:
                out.write(json.dumps(conversation, ensure_ascii=False) + "\n")
        files += 1
        total += len(found)
    print(f"{total} conversations from {files} files of {stdlib} in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
