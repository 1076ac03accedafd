#!/usr/bin/env python3
"""Checks the structural rules docs/architecture.md states for the sources, so that they stay true:

  1. no function in src/ is longer than 120 lines (from the line of its opening brace to the line
     of its closing one; lambdas and local classes count toward the function that holds them);
  2. src/cli/ (the command-line layer: flags in, library calls, printing out) has at most 2,000
     lines of C++ in all;
  3. the kinds of a lowered program's ops (OpKind) are switched on in one place only,
     src/schedule/walker.cc (every other reader steps programs through the walker).

Usage: tools/check_structure.py [REPO_ROOT] [--top N]   (exit 1 when a rule is broken; --top
prints the N longest functions). ctest runs it (tests/CMakeLists.txt: StructureCheck).

The function finder is a brace matcher over the source with comments, string and character
literals blanked out: a '{' opens a function body when the text before it (back to the previous
';', '{' or '}') ends in a parameter list, optionally followed by qualifiers, a trailing return
type or a constructor's initializer list, and does not start a namespace, class, struct, union,
enum, control statement or initializer.
"""
import os
import re
import sys

MAX_FUNCTION_LINES = 120
MAX_CLI_LINES = 2000
SOURCE_EXT = (".h", ".cc", ".cu", ".cuh")
WALKER = os.path.join("src", "schedule", "walker.cc")

_NOT_FUNCTION = re.compile(
    r"^\s*(?:template\s*<[^{]*>\s*)?(?:namespace|class|struct|union|enum|extern\s+\"C\"|if|for|"
    r"while|switch|do|else|try|catch)\b")


def blank_literals_and_comments(text):
    """The text with comments, string and character literals replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i):  # raw string literal R"delim( ... )delim"
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            if c == "'" and j - i > 8:  # a digit separator (1'000), not a character literal
                out.append(c)
                i += 1
                continue
            out.append(" " * (min(j, n - 1) - i + 1))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def is_function_header(header):
    h = " ".join(header.split())
    if not h or _NOT_FUNCTION.match(h) or h.endswith("=") or h.endswith(",") or h.endswith("("):
        return False
    # Constructor initializer list: "Foo::Foo(int a) : a_(a), b_(b)" -> judge the part before it.
    m = re.match(r"^(.*\))\s*:\s*[^:].*$", h)
    if m and not re.search(r"\?\s*[^:]*$", m.group(1)):
        h = m.group(1)
    # Qualifiers and a trailing return type after the parameter list.
    h = re.sub(r"(\s*(const|override|final|noexcept(\([^)]*\))?|mutable|volatile|&|&&|"
               r"->\s*[\w:<>,\s\*&]+))+\s*$", "", h)
    if not h.endswith(")"):
        return False
    # A lambda ("[...](...)") or a call followed by a block is not a named function.
    before = h[: h.rfind("(")] if "(" in h else h
    name = re.search(r"([~\w:]+|operator\s*\S+)\s*$", before)
    if not name or before.rstrip().endswith("]"):
        return False
    return name.group(1) not in ("if", "for", "while", "switch", "catch", "return", "sizeof",
                                 "decltype", "alignas", "static_assert")


def functions(path):
    """(name line, first line, last line) of each function body in the file."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = blank_literals_and_comments(f.read())
    found = []
    stack = []  # (name, line) of the function being read
    depth_in_function = 0
    header_start = 0
    line = 1
    for i, c in enumerate(text):
        if c == "\n":
            line += 1
        elif c in ";":
            if depth_in_function == 0:
                header_start = i + 1
        elif c == "{":
            if depth_in_function > 0:
                depth_in_function += 1
            elif is_function_header(text[header_start:i]):
                head = text[header_start:i]
                head = " ".join(head[: head.find("(")].split()) if "(" in head else ""
                stack.append((head.split(" ")[-1] if head else "?", line))
                depth_in_function = 1
            else:
                header_start = i + 1
        elif c == "}":
            if depth_in_function > 0:
                depth_in_function -= 1
                if depth_in_function == 0:
                    name, first = stack.pop()
                    found.append((name, first, line))
                    header_start = i + 1
            else:
                header_start = i + 1
    return found


def cpp_files(root, sub):
    for d, _, names in os.walk(os.path.join(root, sub)):
        for n in sorted(names):
            if n.endswith(SOURCE_EXT):
                yield os.path.join(d, n)


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    top = 0
    if "--top" in argv:
        top = int(argv[argv.index("--top") + 1])
        args = [a for a in args if a != str(top)]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    problems = []

    lengths = []
    for path in cpp_files(root, "src"):
        rel = os.path.relpath(path, root)
        for name, first, last in functions(path):
            lengths.append((last - first + 1, rel, first, name))
    lengths.sort(reverse=True)
    for n, rel, first, name in lengths:
        if n > MAX_FUNCTION_LINES:
            problems.append(f"{rel}:{first}: function '{name}' is {n} lines "
                            f"(at most {MAX_FUNCTION_LINES}); split it into named steps")

    cli_lines = 0
    for path in cpp_files(root, os.path.join("src", "cli")):
        with open(path, encoding="utf-8", errors="replace") as f:
            cli_lines += sum(1 for _ in f)
    if cli_lines > MAX_CLI_LINES:
        problems.append(f"src/cli has {cli_lines} lines of C++ (at most {MAX_CLI_LINES}); move "
                        "what is not flags or printing into a library under src/")

    for path in cpp_files(root, "src"):
        rel = os.path.relpath(path, root)
        if rel == WALKER:
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = blank_literals_and_comments(f.read())
        for m in re.finditer(r"\bcase\s+OpKind::", text):
            ln = text.count("\n", 0, m.start()) + 1
            problems.append(f"{rel}:{ln}: switches on OpKind; only {WALKER} may (step programs "
                            "through the walker, schedule/walker.h)")

    print(f"check_structure: {len(lengths)} functions in src/, longest {lengths[0][0]} lines "
          f"({lengths[0][1]}:{lengths[0][2]}); src/cli {cli_lines} lines")
    for n, rel, first, name in lengths[:top]:
        print(f"  {n:4d}  {rel}:{first}  {name}")
    for p in problems:
        print("check_structure: " + p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
