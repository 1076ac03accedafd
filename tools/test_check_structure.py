#!/usr/bin/env python3
"""tools/check_structure.py on made-up source trees: each rule fires on a tree that breaks it, and
a tree that keeps them all passes (functions with lambdas, initializer lists, literals holding
braces and comments holding code are measured correctly)."""
import contextlib
import io
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_structure  # noqa: E402


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def run(root):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = check_structure.main(["check_structure", root])
    return rc, out.getvalue(), err.getvalue()


def body(n):
    return "".join(f"  x += {i};\n" for i in range(n))


GOOD = (
    "namespace hp {\n"
    "struct S {\n  int f() const { return 1; }\n};\n"
    "Foo::Foo(int a) : a_(a), b_(a) {\n" + body(10) + "}\n"
    "int g(int x) {\n  auto l = [&](int y) { return y + 1; };\n"
    '  const char* s = "{{{ } ";\n  char c = \'{\';\n  // if (x) {\n' + body(100) + "}\n"
    "}  // namespace hp\n")


def main():
    failures = []
    with tempfile.TemporaryDirectory() as good:
        write(good, "src/a/a.cc", GOOD)
        write(good, "src/schedule/walker.cc", "void w(Op op) {\n  switch (op.kind) {\n"
              "    case OpKind::kCompute: break;\n  }\n}\n")
        write(good, "src/cli/main.cc", "int main() {\n  return 0;\n}\n")
        rc, out, err = run(good)
        if rc != 0 or "longest 106 lines" not in out:
            failures.append(f"good tree: rc {rc}, out {out!r}, err {err!r}")

    with tempfile.TemporaryDirectory() as bad:
        write(bad, "src/a/long.cc", "int too_long(int x) {\n" + body(119) + "  return x;\n}\n")
        write(bad, "src/b/other.cc", "void v(Op op) {\n  switch (op.kind) {\n"
              "    case OpKind::kSendWait: break;\n  }\n}\n")
        write(bad, "src/cli/big.cc", "// line\n" * 2001)
        rc, out, err = run(bad)
        for needle in ("src/a/long.cc:1: function 'too_long' is 122 lines",
                       "src/cli has 2001 lines",
                       "src/b/other.cc:3: switches on OpKind"):
            if needle not in err:
                failures.append(f"bad tree: '{needle}' missing from {err!r}")
        if rc != 1:
            failures.append(f"bad tree: rc {rc}, want 1")

    for f in failures:
        print("FAIL: " + f)
    print("ok" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
