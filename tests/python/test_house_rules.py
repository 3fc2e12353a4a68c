"""The house rules for src/ (docs/architecture.md, "House rules for src/"):
no file over 500 lines, no function over 80, and no branch on a transform
kind or a format outside the places that choose them once."""

import glob
import os
import re

ROOT = os.environ.get("GPUFEED_REPO_ROOT",
                      os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
# The library and its Python binding.
SOURCES = sorted(path for folder in ("src", os.path.join("python", "src"))
                 for pattern in ("*.cc", "*.h", "*.cu")
                 for path in glob.glob(os.path.join(ROOT, folder, "**", pattern), recursive=True))
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80
# A function's header ends with its parameter list and qualifiers (or a
# constructor's initialiser list) just before its body's brace.
FUNCTION_HEADER = re.compile(r"\)\s*(const\s*)?(override\s*)?(final\s*)?(noexcept\s*)?"
                             r"(->\s*[\w:<>,\s*&]+)?$")
NOT_A_FUNCTION = re.compile(r"^\s*(if|else|for|while|switch|catch|do)\b")
LAMBDA = re.compile(r"\]\s*(\(|mutable|\{|$)|\]\s*\([^)]*\)\s*(mutable\s*)?(->[^{]*)?$")


def strip_comments_and_literals(text):
    """The code with comments, strings and characters blanked (newlines kept)."""
    pattern = re.compile(r'//[^\n]*|/\*.*?\*/|R"(\w*)\(.*?\)\1"|"(\\.|[^"\\\n])*"|\'(\\.|[^\'\\\n])*\'',
                         re.S)
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def long_functions(path):
    code = strip_comments_and_literals(open(path, encoding="utf-8").read())
    found, stack, header_start = [], [], 0
    for position, char in enumerate(code):
        if char == "{":
            header = code[header_start:position]
            is_function = (FUNCTION_HEADER.search(header.rstrip()) is not None
                           and not NOT_A_FUNCTION.search(header)
                           and not LAMBDA.search(header.rstrip())
                           and "=" not in header.split("(")[0])
            start = header_start + (len(header) - len(header.lstrip()))
            stack.append((is_function, start))
            header_start = position + 1
        elif char == "}":
            if stack:
                is_function, start = stack.pop()
                if is_function:
                    first = code.count("\n", 0, start) + 1
                    last = code.count("\n", 0, position) + 1
                    if last - first + 1 > MAX_FUNCTION_LINES:
                        name = code[start:code.find("(", start)].split()[-1:]
                        found.append(f"{os.path.relpath(path, ROOT)}:{first}: "
                                     f"{''.join(name)} is {last - first + 1} lines")
            header_start = position + 1
        elif char == ";":
            header_start = position + 1
    return found


def test_no_source_file_over_500_lines():
    long_files = []
    for path in SOURCES:
        lines = open(path, encoding="utf-8").read().count("\n")
        if lines > MAX_FILE_LINES:
            long_files.append(f"{os.path.relpath(path, ROOT)}: {lines} lines")
    assert not long_files, "\n".join(long_files)


def test_no_function_over_80_lines():
    problems = [problem for path in SOURCES for problem in long_functions(path)]
    assert not problems, "\n".join(problems)


def test_the_checker_finds_a_long_function(tmp_path):
    body = "\n".join("  x += %d;" % i for i in range(90))
    source = tmp_path / "long.cc"
    source.write_text("namespace a {\nint Long(int x) {\n%s\n  return x;\n}\n"
                      "int Short() { auto f = [](int y) { return y; }; return f(1); }\n}\n" % body)
    problems = long_functions(str(source))
    assert len(problems) == 1 and "Long is 93 lines" in problems[0], problems


def test_the_pipeline_has_no_branch_on_a_transform_or_a_format():
    # The sample kinds (sample_kind.cc's table and the kinds' own files) and
    # the format registry choose once; the pipeline asks them.
    problems = []
    for name in ("loader.cc", "host_stage.cc", "host_stage.h", "sample_writer.cc",
                 "sample_writer.h", "read_ahead.cc"):
        text = strip_comments_and_literals(
            open(os.path.join(ROOT, "src", "pipeline", name), encoding="utf-8").read())
        for pattern in (r"TransformKind::", r"DatasetFormat::", r"\.transform\b"):
            for match in re.finditer(pattern, text):
                line = text.count("\n", 0, match.start()) + 1
                problems.append(f"src/pipeline/{name}:{line}: {pattern}")
    assert not problems, "\n".join(problems)
