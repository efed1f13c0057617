"""The docs say what is true now and lead somewhere: no issue numbers in the
README, docs/ (stored bench reports included); every `het-tf` command in
the README and the guides parses as the command's own parser takes it; and
every relative link resolves, to a file and to a heading. No TensorFlow
needed: `het-tf`'s parser imports none."""
import pathlib
import re
import shlex

import pytest

from het_tf.apps import cli

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
# The pages a user follows commands from.
GUIDES = [ROOT / "README.md", *sorted((ROOT / "docs" / "guides").glob("*.md"))]
ISSUE = re.compile(r"\bissues? #?\d+|\bissue-\d+", re.IGNORECASE)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?$(.*?)^```", re.MULTILINE | re.DOTALL)
# Inline code that is a command: the subcommand, then flags (a quoted
# message such as `het-tf train: ...` is not one).
INLINE = re.compile(r"`(het-tf (?:[a-z]+|--verbose)(?: --?[^`\n]*| [A-Z]+)*)`")
CODE_SPAN = re.compile(r"`[^`\n]*`")


def _name(path):
    return str(path.relative_to(ROOT))


def test_the_pages_are_there():
    names = {_name(p) for p in DOCS}
    assert {"README.md", "docs/glossary.md", "docs/testing.md",
            "docs/guides/troubleshoot.md"} <= names


@pytest.mark.parametrize("page", DOCS, ids=_name)
def test_no_issue_numbers(page):
    found = [(i + 1, line.strip()) for i, line in enumerate(page.read_text().splitlines())
             if ISSUE.search(line)]
    assert not found, f"{_name(page)} names issues (say what the change was): {found}"


def _slug(heading):
    """GitHub's anchor of a heading."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading)
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def _anchors(page):
    text = FENCE.sub("", page.read_text())
    seen, out = {}, set()
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*#*$", text, re.MULTILINE):
        slug = _slug(heading)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


@pytest.mark.parametrize("page", DOCS, ids=_name)
def test_relative_links_resolve(page):
    broken = []
    for match in LINK.finditer(CODE_SPAN.sub("", FENCE.sub("", page.read_text()))):
        target = match.group(1) or match.group(2)
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = page if not path else (page.parent / path).resolve()
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(target)
    assert not broken, f"{_name(page)}: links that lead nowhere: {broken}"


def _commands(page):
    """The `het-tf` commands a page gives: lines of its code blocks (with
    their continuations) and inline code."""
    text = page.read_text()
    for block in FENCE.findall(text):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = re.sub(r"^\s*(\$\s*)?", "", line)
            # Not a quoted message: `het-tf train: ...`.
            if line.startswith("het-tf ") and not re.match(r"het-tf [a-z]+:", line):
                yield line.split(" #")[0]
    for match in INLINE.finditer(FENCE.sub("", text)):
        yield match.group(1)


def _sample(parser, words):
    """`words` with each placeholder (N, DIR, MODE ...) replaced by a value
    its flag takes, and "..." and alternatives (a|b) cut to what parses."""
    sub = parser._subparsers._group_actions[0].choices.get(words[0]) if words else None
    out = []
    for i, word in enumerate(words):
        if word in ("...", "…"):
            continue
        word = word.split("|")[0] if "|" in word and not word.startswith("-") else word
        if re.fullmatch(r"[A-Z][A-Z0-9_]*", word) and all(w.startswith("-") for w in out):
            word = "info"  # a placeholder for the subcommand
        elif re.fullmatch(r"[A-Z][A-Z0-9_]*", word) and i and sub is not None:
            action = sub._option_string_actions.get(out[-1]) if out else None
            word = (str(action.choices[0]) if action is not None and action.choices
                    else "1")
        out.append(word)
    return out


@pytest.mark.parametrize("page", GUIDES, ids=_name)
def test_every_het_tf_command_parses(page):
    parser = cli._parser()
    commands = list(_commands(page))
    bad = []
    for command in commands:
        words = shlex.split(command)[1:]
        if "--" in words:  # het-tf launch ... -- the chief's own command
            words = words[:words.index("--") + 1] + ["python"]
        try:
            parser.parse_args(_sample(parser, words))
        except SystemExit as e:  # --help exits 0
            if e.code:
                bad.append(command)
    assert not bad, f"{_name(page)}: commands het-tf does not take: {bad}"
