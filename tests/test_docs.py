"""The README stays a few screens and the docs hold together: every relative link and image resolves,
every `#anchor` into a Markdown file names one of its headings (GitHub's slug rule), every docs page
is linked from the README, and no page names a source document by its seed number.

And the core map in docs/layout.md holds: every core module named once, none that does not exist,
each asset module under the groups its assets carry. Plain text reading, but for that last check,
which imports the asset modules (Dagster, no torch).
"""

import re
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
LINKED_PAGES = [README, *DOCS, ROOT / "benchmarks" / "README.md"]
README_MAX_LINES = 150

FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
SOURCE_NAME = re.compile(r"\bseed\s+00[0-9]\b|\bseeds/00", re.IGNORECASE)


def _prose_lines(path: Path, *, blank_code_spans: bool = True) -> list[tuple[int, str]]:
    """(line number, text) of every line outside fenced code blocks; inline code spans blanked unless
    asked to keep them (a heading's slug includes their text)."""
    lines, fenced = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append((number, CODE_SPAN.sub("code", line) if blank_code_spans else line))
    return lines


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: links reduced to their text, lowercase, every character but
    letters, digits, spaces, '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file; a repeated slug gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in _prose_lines(path, blank_code_spans=False):
        match = HEADING.match(line)
        if match:
            slug = github_slug(match.group(2))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def _relative_links(path: Path) -> list[tuple[int, str]]:
    links = []
    for number, line in _prose_lines(path):
        for target in LINK.findall(line):
            if not re.match(r"^(https?:|mailto:)", target, re.IGNORECASE):
                links.append((number, target))
    return links


def _where(path: Path, number: int) -> str:
    return f"{path.relative_to(ROOT)}:{number}"


def test_readme_is_a_few_screens():
    count = len(README.read_text(encoding="utf-8").splitlines())
    assert count <= README_MAX_LINES, f"README.md:{count}: {count} lines, more than {README_MAX_LINES}"


def test_every_relative_link_and_image_resolves():
    broken = []
    for page in LINKED_PAGES:
        for number, target in _relative_links(page):
            file_part, _, anchor = unquote(target).partition("#")
            resolved = (page.parent / file_part).resolve() if file_part else page
            if not resolved.exists() or not resolved.is_relative_to(ROOT):
                broken.append(f"{_where(page, number)}: {target} (no such file or folder)")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{_where(page, number)}: {target} (no heading #{anchor} in {resolved.name})")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_readme_links_every_docs_page():
    linked = {(README.parent / unquote(t).partition("#")[0]).resolve() for _, t in _relative_links(README)}
    unlinked = [str(page.relative_to(ROOT)) for page in DOCS if page.resolve() not in linked]
    assert not unlinked, "README.md: no link to " + ", ".join(unlinked)


def test_no_page_names_a_source_document_by_its_seed_number():
    offenders = []
    for page in [README, *DOCS]:
        text = page.read_text(encoding="utf-8")
        for match in SOURCE_NAME.finditer(text):
            number = text.count("\n", 0, match.start()) + 1
            offenders.append(f"{_where(page, number)}: {match.group(0)!r}")
    assert not offenders, "name the system by what it does, not by its seed:\n" + "\n".join(offenders)


def test_the_slug_rule():
    assert github_slug("16. Every value's domain") == "16-every-values-domain"
    assert github_slug("What `scripts/setup.sh` installs") == "what-scriptssetupsh-installs"
    assert github_slug("The rules: `flag_row` and `left_alone`") == "the-rules-flag_row-and-left_alone"
    assert github_slug("Sharing the UI: behind a [proxy](x.md)") == "sharing-the-ui-behind-a-proxy"


CORE = ROOT / "apsft_dagster" / "core"
TICKED = re.compile(r"`([^`]+)`")


def core_map() -> list[tuple[set[str], list[str], list[str]]]:
    """docs/layout.md's map of the core: (groups, package modules, core modules) per row."""
    lines = (ROOT / "docs" / "layout.md").read_text().split("## A map of the core", 1)[1].splitlines()
    rows = [line for line in lines[:next(i for i, line in enumerate(lines) if line.startswith("## "))]
            if line.startswith("| ") and not line.startswith("| group") and not line.startswith("|---")]
    return [(set(TICKED.findall(group)), TICKED.findall(modules), TICKED.findall(cores))
            for group, modules, cores in (row.strip("|").split(" | ") for row in rows)]


def core_entries() -> set[str]:
    """Every module (`name`) and subpackage (`name/`) of core/."""
    return ({p.stem for p in CORE.glob("*.py") if p.stem != "__init__"}
            | {f"{p.name}/" for p in CORE.iterdir() if (p / "__init__.py").is_file()})


def _groups(module_path: str) -> set[str]:
    """The asset groups of the assets a package module defines itself (not those it imports)."""
    import importlib

    import dagster as dg

    name = "apsft_dagster." + module_path.removesuffix(".py").replace("/", ".")
    module = importlib.import_module(name)
    return {group for value in vars(module).values() if isinstance(value, dg.AssetsDefinition)
            and value.node_def.compute_fn.decorated_fn.__module__ == name
            for group in value.group_names_by_key.values()}


def test_the_core_map_names_every_core_module_once_and_only_real_ones():
    named = [core for *_, cores in core_map() for core in cores]
    assert len(named) > 40  # the map was read
    assert sorted(n for n in set(named) if named.count(n) > 1) == []
    assert {"missing from the map": sorted(core_entries() - set(named)),
            "not in core/": sorted(set(named) - core_entries())} == {"missing from the map": [], "not in core/": []}


def test_the_core_map_gives_each_asset_module_its_groups():
    rows = core_map()
    assert sum(bool(groups) for groups, *_ in rows) >= 14
    for groups, modules, _ in rows:
        assert all((ROOT / "apsft_dagster" / m).exists() for m in modules), modules
        if groups:
            assert set().union(*map(_groups, modules)) == groups, modules
