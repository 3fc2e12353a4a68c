"""The docs match the tree: every link between pages (and its #anchor), every
repository path a page names in backquotes, and every registered format
named where the formats are described."""

import glob
import os
import re

import gpufeed

ROOT = os.environ.get("GPUFEED_REPO_ROOT",
                      os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PAGES = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) + [os.path.join(ROOT, "README.md")]
# What runs write (benchmarks/run.sh's results): named by the docs, not in a fresh clone.
GENERATED = ("benchmarks/results/", "build/")


def github_slug(heading):
    heading = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return heading.replace(" ", "-")


def test_every_link_between_pages_leads_somewhere():
    problems = []
    for page in PAGES:
        text = open(page, encoding="utf-8").read()
        for match in re.finditer(r"\]\(([\w./#-]+)\)", text):
            target = match.group(1)
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not os.path.exists(full):
                problems.append(f"{page}: link {target}: {full} does not exist")
            elif anchor and full.endswith(".md"):
                headings = re.findall(r"^#+\s+(.*)$", open(full, encoding="utf-8").read(), re.M)
                if anchor not in {github_slug(h) for h in headings}:
                    problems.append(f"{page}: link {target}: no heading #{anchor} in {full}")
    assert not problems, "\n".join(problems)


def test_every_repository_path_a_page_names_exists():
    problems = []
    pattern = r"`((?:src|tests|benchmarks|python|include|docs|examples|cmake|\.ci)/[\w./-]+)`"
    for page in PAGES:
        for path in re.findall(pattern, open(page, encoding="utf-8").read()):
            if path.startswith(GENERATED):
                continue
            # A path may name a stem (`src/format/token_corpus` for .h and .cc).
            if not glob.glob(os.path.join(ROOT, glob.escape(path)) + "*"):
                problems.append(f"{page}: `{path}` does not exist")
    assert not problems, "\n".join(problems)


def test_every_registered_format_is_described():
    formats = open(os.path.join(ROOT, "docs", "formats.md"), encoding="utf-8").read()
    missing = [name for name in gpufeed.FORMATS
               if name != "auto" and not re.search(rf"\b{name}\b", formats)]
    assert not missing, f"docs/formats.md does not describe {missing}"
