"""The numbers a learner reads are the numbers the chapter prints.

For every chapter (any ``notebooks/NN_*.ipynb`` present, so new chapters are covered as they arrive) this test
takes each number in a markdown cell and looks for it in three places:

1. the chapter's **stored outputs** (stream text and ``text/plain`` of every code cell except the quiz, whose
   text is authored, not run);
2. the chapter's **code**: a literal the learner can see in a code cell (``steps=250``, ``d_model=64``) is a
   setting, not a result, and the prose may repeat it (when the chapter trains from the course's recipe table,
   ``tfm_lesson/train/recipes.py``, that table counts as its code);
3. the chapter's **constants**, ``tests/prose_constants.toml``: a number that comes from neither (a figure of
   the paper, a formula's value) with where it comes from.

A number that is in none of them fails the test: either the prose typed in a result that no cell prints (make
a cell print it and say "the cell above prints ..."), or the figure is stale.

What counts as a number (the rules, kept narrow so that what is left is checked):

- numbers with a decimal point (``0.616``, ``−0.62``), percentages (``98.1%``) and integers of 10 or more
  (``1,536,449``, ``250``); integers 0-9 are left out: in prose they count things ("4 heads", "2 blocks") and
  number them ("head 2", "step 1"), which a text search cannot tell apart from results; except a count of
  results, "5 of 200" (an integer followed by "of" and a number), which is checked whatever its size;
- the sign is ignored (``−0.62`` matches a printed ``-0.62`` or ``0.62``); thousands separators are removed;
- a prose number matches an output number that rounds to it at the prose's precision (prose ``0.62``,
  output ``0.6213``); a percentage also matches an output fraction (``98.1%`` and ``0.981``); a figure written
  in scientific notation in a formula is left out with the formula;
- left out of the prose before the search: inline code and code blocks (checked by running them), LaTeX
  (``$...$``: formulas, whose numbers are exponents and indices), link targets, the exercise label line
  (``**Difficulty** 1/3 ...``), and references: ``chapter(s) 10–13``, ``section 3.4``, ``table 3``,
  ``equation (1)``, ``exercise 2``, ``cell 37``, ``figure 1``, years of citations (4 digits from 1900 to 2099
  next to a name, "et al." or in parentheses, and any integer from 1950 to 2039), version numbers
  (``torch 2.13``, ``v4``, compute capability ``8.0``), number formats (``16-bit``), names with digits
  (``GPT-2``, ``x86-64``, ``Llama-2-7B``) and a table's row number (``| 13 | ...``).

The instructors' pages (``book/instructors_answers.md``, ``book/instructors_paths.md``) quote the chapters:
every figure they attribute to a chapter (see :func:`page_claims`) must be in that chapter's outputs, code or
constants (run times also in BENCHMARKS.md), or in the page's own constants.
"""
from __future__ import annotations

import re
import sys
try:
    import tomllib  # Python 3.11+
except ModuleNotFoundError:  # Python 3.10: the same parser as a package (requirements.txt)
    import tomli as tomllib
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
CONSTANTS_FILE = Path(__file__).with_name("prose_constants.toml")
PAGES = [ROOT / "book" / "instructors_answers.md", ROOT / "book" / "instructors_paths.md"]

NUMBER = re.compile(r"(?<![\w.])[−\-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][−\-+]?\d+)?%?(?![\w])")
YEAR = r"(?:19|20)\d\d[a-z]?"
DROP = [
    re.compile(r"```.*?```", re.S),  # code blocks
    re.compile(r"`[^`\n]*`"),  # inline code
    re.compile(r"\$\$.*?\$\$", re.S),  # display math
    re.compile(r"(?<!\\)\$[^$]+?\$", re.S),  # inline math
    re.compile(r"\]\([^)]*\)"),  # link targets
    re.compile(r"https?://\S+"),
    re.compile(r"^.*\*\*Difficulty\*\*.*$", re.M),  # the exercise label line
    re.compile(r"<[^>\n]+>"),  # HTML tags
    re.compile(r"\b(?:chapters?|sections?|§|tables?|figures?|fig\.|equations?|eq\.|exercises?|cells?|parts?|"
               r"steps?\s(?=\d\b)|questions?|quiz|appendix|lines?|issues?|mistakes?)\s*\(?\d+(?:\.\d+)*\)?"
               r"(?:\s*(?:[–\-,]|and|or|to)\s*\d+(?:\.\d+)*)*", re.I),
    re.compile(rf"\b(?:et al\.?,?|and \w+,?|[A-Z][\w\-]+,?)\s*\(?{YEAR}\)?"),  # "Vaswani et al., 2017", "Ba (2016)"
    re.compile(rf"\({YEAR}(?:[,;][^)]*)?\)"),  # "(2017)", "(2019, table 3)"
    re.compile(r"\b(?:v|version\s|torch\s|PyTorch\s|Python\s|ipywidgets\s|nbformat\s|CUDA\s|python\s)"
               r"\d+(?:\.\d+)+", re.I),
    re.compile(r"^\s*#{1,6} .*$", re.M),  # headings ("# 14 · A language model")
    re.compile(r"^\|\s*\d+\s*\|", re.M),  # a table's row number ("| 13 | ...")
    re.compile(r"\b\d+-bit\b"),  # a number format ("16-bit floats")
    re.compile(r"(?<![\d,.])(?:19[5-9]\d|20[0-3]\d)(?![\d,]|\.\d)"),  # years ("the Transformer of 2017", "2021.")
    re.compile(r"\b[A-Za-z][\w.]*(?:-[\w.]*\d[\w.]*)+"),  # names with digits: GPT-2, x86-64, Llama-2-7B
    re.compile(r"\bcompute capability \d+(?:\.\d+)?", re.I),
]


def prose_text(markdown: str) -> str:
    for pattern in DROP:
        markdown = pattern.sub(" ", markdown)
    return markdown


def _normal(token: str) -> tuple[str, bool] | None:
    """'−1,234.50%' -> ('1234.50', True): digits without sign or separators, and whether it was a percentage."""
    percent = token.endswith("%")
    text = token.rstrip("%").lstrip("−-+").replace(",", "")
    return text, percent


SCALE = re.compile(r"\s?(M\b|million\b|k\b|K\b|B\b|billion\b)")
SCALES = {"M": 6, "million": 6, "k": 3, "K": 3, "B": 9, "billion": 9}


def prose_numbers(markdown: str) -> list[str]:
    """The numbers of a markdown text that the rules check (module docstring), as written; a scale word that
    follows stays with its number ("2.1 M", "65 million")."""
    found = []
    text_all = prose_text(markdown)
    for match in NUMBER.finditer(text_all):
        token = match.group()
        text, percent = _normal(token)
        if "e" in text.lower():
            continue
        scale = SCALE.match(text_all, match.end())
        if scale:
            found.append(token + " " + scale.group(1))
        elif "." in text or percent:
            found.append(token)
        elif int(text) >= 10 or re.match(r"\s+of\s+(?:the\s+)?\d", text_all[match.end():]):
            found.append(token)  # "8 of 200": a count of a run's results, whatever its size
    return found


def output_numbers(text: str) -> set[str]:
    """Every number printed in ``text``, normalised (no sign, no thousands separators, ``3e-3`` also as
    ``0.003``, ``20_000`` as ``20000``)."""
    text = re.sub(r"(?<=\d)_(?=\d)", "", text)
    pattern = re.compile(r"(?<![\w.])[−\-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][−\-+]?\d+)?")
    out = set()
    for token in pattern.findall(text):
        plain = token.lstrip("−-+").replace(",", "")
        out.add(plain)
        if "e" in plain.lower():
            try:
                out.add(format(Decimal(plain.replace("−", "-")).normalize(), "f"))
            except InvalidOperation:
                pass
    # also the digits of numbers glued to words or units ("45s", "x2", "1.7x", "(3,")
    for token in re.findall(r"\d+(?:\.\d+)?", text):
        out.add(token)
    return out


def _rounds_to(value: str, target: str) -> bool:
    """Whether the number ``value`` rounds to ``target`` at ``target``'s number of decimals."""
    try:
        v, t = Decimal(value), Decimal(target)
    except InvalidOperation:
        return False
    places = Decimal(1).scaleb(t.as_tuple().exponent)
    return any(v.quantize(places, rounding=mode) == t for mode in (ROUND_HALF_UP, ROUND_HALF_EVEN))


def is_found(token: str, printed: set[str]) -> bool:
    parts = token.split(" ")
    text, percent = _normal(parts[0])
    if len(parts) == 2:  # "2.1 M": a printed 2,099,712 (or a printed 2.1) rounds to it
        if text in printed:
            return True
        shift = SCALES[parts[1]]
        return any(_rounds_to(str(Decimal(p).scaleb(-shift)), text) for p in printed if "e" not in p.lower())
    if text in printed:
        return True
    candidates = [p for p in printed if "e" not in p.lower()]
    if any(_rounds_to(p, text) for p in candidates if "." in p):
        return True
    if percent:
        return any(_rounds_to(str(Decimal(p) * 100), text) for p in candidates if "." in p)
    return False


def _is_quiz(cell) -> bool:
    return "quiz.show(" in cell.source


def stored_text(nb) -> str:
    parts = []
    for cell in nb.cells:
        if cell.cell_type != "code" or _is_quiz(cell):
            continue
        for output in cell.get("outputs", []):
            if "text" in output:
                parts.append(output["text"])
            data = output.get("data", {})
            if "text/plain" in data:
                parts.append(data["text/plain"])
            if "text/markdown" in data:
                parts.append(data["text/markdown"])
    return "\n".join(parts)


RECIPES_FILE = ROOT / "tfm_lesson" / "train" / "recipes.py"


def code_text(nb) -> str:
    """The chapter's code cells; with the course's recipe table when the chapter trains from it (its settings
    are then written there, not in the chapter)."""
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code" and not _is_quiz(c))
    if RECIPES_FILE.exists() and re.search(r"\brecipe\(|\bRECIPES\b", code):
        code += "\n" + RECIPES_FILE.read_text(encoding="utf-8")
    return code


def load_constants() -> dict[str, dict[str, str]]:
    """``{"14": {"0.98": "the paper, section 5.3 (Adam's beta_2)", ...}, ...}`` from prose_constants.toml."""
    data = tomllib.loads(CONSTANTS_FILE.read_text(encoding="utf-8"))
    return {key: {str(k): str(v) for k, v in table.items()} for key, table in data.items()}


def _allowed(token: str, printed: set[str], constants: dict[str, str]) -> bool:
    text, _ = _normal(token.split(" ")[0])
    return is_found(token, printed) or text in constants or token in constants


def unprinted_numbers(path: Path, constants: dict[str, str]) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    printed = output_numbers(stored_text(nb)) | output_numbers(code_text(nb))
    missing = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        for token in prose_numbers(cell.source):
            if not _allowed(token, printed, constants):
                at = cell.source.find(token.split(" ")[0])
                context = cell.source[max(0, at - 50):at + len(token) + 30].replace("\n", " ")
                missing.append(f"cell {i}: {token}  ...{context}...")
    return missing


def _chapter_of(path: Path) -> str:
    return path.name[:2]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_number_in_the_prose_is_printed_or_sourced(path: Path) -> None:
    constants = load_constants().get(_chapter_of(path), {})
    missing = unprinted_numbers(path, constants)
    assert not missing, (
        f"{path.name}: numbers in the prose that no stored output of the chapter prints and that are not in its "
        f"constants ({CONSTANTS_FILE.name}, with their source). Print them from a cell (\"the cell above prints "
        "...\"), fix the stale figure, or add a true constant with its source:\n  " + "\n  ".join(missing))


def test_every_constant_has_a_source_and_is_used() -> None:
    constants = load_constants()
    chapters = {_chapter_of(p) for p in CHAPTERS}
    for key, table in constants.items():
        assert key in chapters or key in {p.stem for p in PAGES}, f"{CONSTANTS_FILE.name}: [{key}] names no chapter"
        for number, source in table.items():
            assert len(source.split()) >= 2, f"[{key}] {number}: give its source (paper table, formula, ...)"


ATTRIBUTION = re.compile(r"stored|the chapter (?:prints|finds|gives)|the chapter's (?:[\d.,]+\b|loss|BLEU|perplexity|"
                         r"exact|whole model|figure)", re.I)


def page_claims(page: Path) -> list[tuple[str, str, str]]:
    """``(chapter, number, context)`` for each figure an instructors' page attributes to a chapter.

    The answers page mostly reports what ``book/try_this.py`` prints (runs with other settings, which the
    chapters do not store); what it checks here are the sentences that quote the chapter itself ("the chapter's
    86.5", "the chapter's stored run gives ..."): the numbers from the attribution to the end of its clause (at
    most 60 characters), under the section ``## NN · ...`` they belong to. The paths
    page's machine-time table (rows ``| NN title | 16.5 s | 50 min |``) quotes run times, which come from the
    stored runs or BENCHMARKS.md. Durations in minutes (learners' times, plans) are estimates and are not checked.
    """
    text = page.read_text(encoding="utf-8")
    claims = []
    if page.stem == "instructors_paths":
        for line in text.splitlines():
            row = re.match(r"\|\s*(\d\d) [^|]*\|\s*([\d.,]+) s\b", line)
            if row:
                claims.append((row.group(1), row.group(2), line.strip()))
        return claims
    chapter = None
    for block in re.split(r"(?m)^(?=## )", text):
        heading = re.match(r"## (\d\d)\b", block)
        chapter = heading.group(1) if heading else None
        if chapter is None:
            continue
        for sentence in re.split(r"(?<=[.;:])\s+(?=[A-Z(*])|\n(?=\|)|\n\n", block):
            for found in ATTRIBUTION.finditer(sentence):
                # the figures the attribution introduces: up to the end of its clause, at most 60 characters
                clause = re.split(r";|\. |, and |\n", sentence[found.start():])[0][:60]
                for token in prose_numbers(clause):
                    claims.append((chapter, token, " ".join(clause.split())))
    return claims


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_instructor_pages_quote_what_the_chapters_print(page: Path) -> None:
    constants = load_constants()
    by_chapter = {_chapter_of(p): p for p in CHAPTERS}
    benchmarks = output_numbers((ROOT / "BENCHMARKS.md").read_text(encoding="utf-8"))
    printed_of: dict[str, set[str]] = {}
    missing = []
    for chapter, token, context in page_claims(page):
        if chapter not in by_chapter:
            continue
        if chapter not in printed_of:
            nb = nbformat.read(by_chapter[chapter], as_version=4)
            printed_of[chapter] = output_numbers(stored_text(nb)) | output_numbers(code_text(nb))
        printed = printed_of[chapter] | (benchmarks if page.stem == "instructors_paths" else set())
        allowed = {**constants.get(chapter, {}), **constants.get(page.stem, {})}
        if not _allowed(token, printed, allowed):
            missing.append(f"[chapter {chapter}] {token}  ...{context}...")
    assert not missing, (f"{page.name}: figures attributed to a chapter that its stored outputs do not show (nor "
                         f"its constants; for run times, BENCHMARKS.md):\n  " + "\n  ".join(missing))


def test_the_rules_check_what_they_say() -> None:
    """The extractor and the matcher on their own cases."""
    text = ("The loss is 0.616 nats lower; exact match 98.1% after 1,536,449 characters and 250 steps. "
            "See chapter 10 and chapters 10–13, section 3.4, table 3 (Vaswani et al., 2017), `steps=600`, "
            "$10000^{2i/d}$, with 4 heads.\n**Difficulty** 1/3 · **Importance** 3/3 · **Time** ~10 min")
    assert prose_numbers(text) == ["0.616", "98.1%", "1,536,449", "250"]
    printed = output_numbers("loss 0.6163, exact match 0.981, 1536449 chars; trained 250 steps in 45 s")
    assert is_found("0.616", printed) and is_found("98.1%", printed) and is_found("1,536,449", printed)
    assert is_found("−0.62", output_numbers("-0.6213")) and not is_found("0.63", output_numbers("-0.6213"))
    assert not is_found("8.3", printed) and not is_found("86.5", output_numbers("BLEU 85.9"))
    assert prose_numbers("about 2.1 M parameters, 65 million in all") == ["2.1 M", "65 million"]
    assert is_found("2.1 M", output_numbers("2,099,712")) and not is_found("2.2 M", output_numbers("2,099,712"))
    assert is_found("0.003", output_numbers("peak_lr=3e-3")) and is_found("20,000", output_numbers("n = 20_000"))
    assert prose_numbers("Llama 2 (2023), the Transformer of 2017; mistakes 9, 10, 14 and 15") == []
    assert prose_numbers("Olsson et al., *Induction Heads*, 2022. On x86-64, GPT-2 and Llama-2-7B") == []
    assert prose_numbers("more probable for only 8 of 200 sentences; 3 of the 24 heads") == ["8", "200", "3", "24"]


if __name__ == "__main__":  # list every finding, chapter by chapter: python tests/test_numbers_in_prose.py
    table = load_constants()
    for chapter in CHAPTERS:
        for line in unprinted_numbers(chapter, table.get(_chapter_of(chapter), {})):
            print(chapter.stem, line)
    sys.exit(0)
