"""Check your understanding: a few multiple-choice questions at the end of every chapter.

Each question aims at one misconception the chapter addresses. Every option carries its own feedback:
a wrong option says why it is wrong, the right one says why it is right.

    from tfm_lesson import quiz
    quiz.show("03")                 # the questions of chapter 03, answerable in the notebook
    quiz.load_quiz("03")            # the same questions as data: list[Question]
    my_quiz = quiz.hand_in("03", "BAC")  # hand in one letter per question (the cell after the quiz, when graded)

The questions of chapter NN live in ``tfm_lesson/course/quizzes/chNN.py`` as a list ``QUESTIONS``.

In a live notebook :func:`show` draws radio buttons and a "Check" button per question. Where no widget
frontend runs (the book, GitHub, a notebook opened without its kernel) the same output shows a static
page: each question, its options, and the answer with every option's feedback folded under "Answer".
"""
from __future__ import annotations

import html
import importlib
import re
from dataclasses import dataclass
from typing import Sequence

__all__ = ["Question", "load_quiz", "show", "Quiz", "quiz_chapters", "is_quiz_cell", "hand_in", "HANDED_IN",
           "read_letters", "marks", "handed_in_marks", "quiz_score"]

#: a chapter's quiz cell: ``quiz.show("NN")``
QUIZ_CALL = re.compile(r"""(?:^|[\s.])quiz\.show\(\s*["'](\d\d)["']\s*\)""")

LETTERS = "ABCDEFGHIJ"
RIGHT_COLOUR = "#009E73"  # Okabe-Ito bluish green
WRONG_COLOUR = "#D55E00"  # Okabe-Ito vermilion


@dataclass(frozen=True)
class Question:
    """One multiple-choice question: ``options[answer]`` is right; ``feedback[i]`` explains option ``i``."""

    prompt: str
    options: Sequence[str]
    answer: int
    feedback: Sequence[str]

    def __post_init__(self) -> None:
        if not isinstance(self.prompt, str) or not self.prompt.strip():
            raise ValueError("prompt must be a non-empty string")
        if isinstance(self.options, str) or len(self.options) < 2:
            raise ValueError(f"options must be a list of at least 2 strings, got {self.options!r}")
        if len(self.options) > len(LETTERS):
            raise ValueError(f"at most {len(LETTERS)} options, got {len(self.options)}")
        if any(not isinstance(o, str) or not o.strip() for o in self.options):
            raise ValueError(f"every option must be a non-empty string: {self.options!r}")
        if len({o.strip() for o in self.options}) != len(self.options):
            raise ValueError(f"options must differ from each other: {self.options!r}")
        if isinstance(self.answer, bool) or not isinstance(self.answer, int) or not 0 <= self.answer < len(self.options):
            raise ValueError(f"answer must be the index of the right option, in [0, {len(self.options)}), "
                             f"got {self.answer!r}")
        if isinstance(self.feedback, str) or len(self.feedback) != len(self.options):
            raise ValueError(f"feedback needs one entry per option ({len(self.options)}), got "
                             f"{len(self.feedback) if not isinstance(self.feedback, str) else 'a string'}")
        if any(not isinstance(f, str) or not f.strip() for f in self.feedback):
            raise ValueError("every option needs non-empty feedback saying why it is right or wrong")

    def is_right(self, choice: int) -> bool:
        return choice == self.answer

    def reply(self, choice: int) -> str:
        """What the learner reads after choosing option ``choice``."""
        if not isinstance(choice, int) or not 0 <= choice < len(self.options):
            raise ValueError(f"choice must be an option index in [0, {len(self.options)}), got {choice!r}")
        verdict = "Right." if self.is_right(choice) else "Not quite."
        return f"{verdict} {self.feedback[choice]}"


def _chapter_id(chapter: str | int) -> str:
    text = f"{chapter:02d}" if isinstance(chapter, int) and not isinstance(chapter, bool) else str(chapter)
    if not re.fullmatch(r"\d{2}", text):
        raise ValueError(f"chapter must be two digits like '03' (or the number 3), got {chapter!r}")
    return text


def quiz_chapters() -> list[str]:
    """The chapters that have a quiz, e.g. ``['00', '01', ...]``."""
    import pkgutil

    # An arrow up on purpose: quizzes/chNN.py are data written with this module's Question; this loader only
    # lists them (a package of questions is the course's format for them, one file a chapter).
    from . import quizzes

    return sorted(m.name[2:] for m in pkgutil.iter_modules(quizzes.__path__) if re.fullmatch(r"ch\d{2}", m.name))


def load_quiz(chapter: str | int) -> list[Question]:
    """The questions of a chapter (``"03"`` or ``3``), checked: each has exactly one right option."""
    cid = _chapter_id(chapter)
    try:
        module = importlib.import_module(f"{__package__}.quizzes.ch{cid}")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.endswith(f"ch{cid}"):
            raise ValueError(f"chapter {cid} has no quiz; chapters with one: {', '.join(quiz_chapters())}") from None
        raise
    questions = list(getattr(module, "QUESTIONS", []))
    if not questions or not all(isinstance(q, Question) for q in questions):
        raise ValueError(f"tfm_lesson/course/quizzes/ch{cid}.py must define QUESTIONS, a non-empty list of Question")
    return questions


def is_quiz_cell(cell: dict) -> bool:
    """A code cell that shows a chapter's quiz. Its stored output (the static page) holds every answer: a student
    copy clears it, and running the cell draws the live quiz, which tells an answer only once it is chosen."""
    source = cell.get("source", "")
    source = "".join(source) if isinstance(source, list) else source  # nbformat's JSON may store a list of lines
    return cell.get("cell_type") == "code" and QUIZ_CALL.search(source) is not None


# ---------------------------------------------------------------------------------------------------------
# the static page (book, GitHub, a notebook without a kernel)
def _inline(text: str) -> str:
    """Escape HTML, then show `code` as code."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def to_html(questions: Sequence[Question], title: str = "Check your understanding") -> str:
    """Every question with its options; answer and feedback folded under <details>."""
    parts = [f"<div class='tfm-quiz-static'><p><b>{html.escape(title)}</b> "
             "(run the cell in a live notebook to answer; or open each answer below)</p>"]
    for n, q in enumerate(questions, 1):
        options = "".join(f"<li><b>{LETTERS[i]}.</b> {_inline(o)}</li>" for i, o in enumerate(q.options))
        feedback = "".join(
            f"<li><b>{LETTERS[i]}</b> ({'right' if q.is_right(i) else 'wrong'}): {_inline(f)}</li>"
            for i, f in enumerate(q.feedback))
        parts.append(
            f"<div class='tfm-quiz-question'><p><b>{n}.</b> {_inline(q.prompt)}</p>"
            f"<ul style='list-style:none'>{options}</ul>"
            f"<details><summary>Answer</summary><p><b>{LETTERS[q.answer]}.</b> {_inline(q.options[q.answer])}</p>"
            f"<ul>{feedback}</ul></details></div>")
    parts.append("</div>")
    return "".join(parts)


def to_text(questions: Sequence[Question]) -> str:
    lines = []
    for n, q in enumerate(questions, 1):
        lines.append(f"{n}. {q.prompt}")
        lines.extend(f"   {LETTERS[i]}. {o}" for i, o in enumerate(q.options))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------
# the live widget
class Quiz:
    """The questions as ipywidgets: per question, radio buttons, a Check button and a feedback line.

    ``answer(n, choice)`` does what a click does (tests and scripts use it); ``replies[n]`` is the text now
    shown under question ``n`` ("" before any check).
    """

    def __init__(self, questions: Sequence[Question], title: str = "Check your understanding") -> None:
        import ipywidgets as widgets

        self.questions = list(questions)
        self.title = title
        self.replies = [""] * len(self.questions)
        self._choices, self._feedback, boxes = [], [], []
        for n, q in enumerate(self.questions):
            choice = widgets.RadioButtons(options=[(f"{LETTERS[i]}. {o}", i) for i, o in enumerate(q.options)],
                                          value=None, layout=widgets.Layout(width="auto"))
            button = widgets.Button(description="Check", button_style="info")
            feedback = widgets.HTML("")
            button.on_click(lambda _b, n=n: self._check(n))
            choice.add_class("tfm-quiz-choice")
            button.add_class("tfm-quiz-check")
            feedback.add_class("tfm-quiz-feedback")
            prompt = widgets.HTML(f"<p><b>{n + 1}.</b> {_inline(q.prompt)}</p>")
            box = widgets.VBox([prompt, choice, button, feedback])
            box.add_class("tfm-quiz-question")
            self._choices.append(choice)
            self._feedback.append(feedback)
            boxes.append(box)
        # ipywidgets 7 (Colab, Notebook 6) keeps a radio label on one line: a long option pushed its button out of
        # view. This rule lets labels wrap (ipywidgets 8 already does).
        wrap = "<style>.tfm-quiz-choice label { white-space: normal !important; height: auto !important; }</style>"
        self.widget = widgets.VBox([widgets.HTML(f"{wrap}<h4>{html.escape(title)}</h4>"), *boxes])
        self.widget.add_class("tfm-quiz")

    def _check(self, n: int) -> None:
        choice = self._choices[n].value
        if choice is None:
            self.replies[n] = "Choose an option first."
            self._feedback[n].value = f"<i>{self.replies[n]}</i>"
            return
        self.answer(n, choice)

    def answer(self, n: int, choice: int) -> str:
        """Choose option ``choice`` of question ``n`` and check it; returns the feedback shown."""
        if not 0 <= n < len(self.questions):
            raise ValueError(f"n must be a question index in [0, {len(self.questions)}), got {n!r}")
        q = self.questions[n]
        reply = q.reply(choice)
        self._choices[n].value = choice
        self.replies[n] = reply
        colour, mark, css = ((RIGHT_COLOUR, "✔", "tfm-quiz-right") if q.is_right(choice)
                             else (WRONG_COLOUR, "✘", "tfm-quiz-wrong"))
        self._feedback[n].value = f"<p class='{css}' style='color:{colour}'>{mark} {_inline(reply)}</p>"
        return reply

    def _repr_mimebundle_(self, **kwargs) -> dict:
        from ..look._widget_display import widget_bundle

        data = widget_bundle(self.widget, **kwargs)  # ipywidgets 7 widgets have no _repr_mimebundle_
        data["text/plain"] = to_text(self.questions)
        data["text/html"] = to_html(self.questions, self.title)
        return data


def show(chapter: str | int | Sequence[Question], title: str = "Check your understanding") -> Quiz:
    """The quiz of a chapter (``"03"``) or a list of questions, to display as a cell's result."""
    questions = chapter if isinstance(chapter, (list, tuple)) else load_quiz(chapter)
    if not questions or not all(isinstance(q, Question) for q in questions):
        raise ValueError("show() takes a chapter like '03' or a non-empty list of Question")
    return Quiz(questions, title)


# ---------------------------------------------------------------------------------------------------------
# handing the quiz in: one letter per question, written in the notebook where a grader can read it
UNANSWERED = "? "  # a question left unanswered in a hand-in


def read_letters(questions: Sequence[Question], letters: str) -> list[int | None]:
    """The option chosen for each question (None: unanswered) from a hand-in's ``letters``, one per question in
    order (``"BAC"``; ``"?"`` or a space leaves a question unanswered; fewer letters leave the last ones
    unanswered; lower case counts). ValueError naming the question for a letter outside its options, for more
    letters than questions, or for a character that is not a letter."""
    if not isinstance(letters, str):
        raise ValueError(f"letters must be a string like \"BAC\" (one letter per question), got {letters!r}")
    if len(letters) > len(questions):
        raise ValueError(f"letters has {len(letters)} characters for {len(questions)} questions: one letter per "
                         f"question, in order (\"?\" for one you skip), got {letters!r}")
    chosen: list[int | None] = []
    for n, (q, ch) in enumerate(zip(questions, letters), 1):
        if ch in UNANSWERED:
            chosen.append(None)
            continue
        allowed = LETTERS[:len(q.options)]
        if ch.upper() not in allowed:
            raise ValueError(f"letters[{n - 1}] = {ch!r} for question {n}: its options are "
                             f"{', '.join(allowed)} (or \"?\" to leave it unanswered)")
        chosen.append(allowed.index(ch.upper()))
    return chosen + [None] * (len(questions) - len(chosen))


def marks(questions: Sequence[Question], letters: str) -> list[bool | None]:
    """Per question: True right, False wrong, None unanswered (ValueError as :func:`read_letters`)."""
    return [None if c is None else q.is_right(c) for q, c in zip(questions, read_letters(questions, letters))]


#: what :func:`hand_in` recorded in this kernel, by chapter (``{"03": "BA?"}``): graders that run in the kernel
#: (the nbgrader and Otter exports) read it whatever name the result was bound to
HANDED_IN: dict[str, str] = {}


def hand_in(chapter: str | int, letters: str) -> str:
    """Record your quiz answers: one letter per question, in order (``"BAC"``; ``"?"`` skips one). Prints what
    was recorded and what is still missing; returns the letters as recorded (upper case, ``"?"`` for a gap).

    It does not say which answers are right: the quiz above does, with the reason, when you press "Check".
    A grader reads the letters from this cell's text, so write them in quotes in the call itself."""
    cid = _chapter_id(chapter)
    HANDED_IN.pop(cid, None)  # a hand-in that fails leaves nothing recorded, as a grader reading the cell sees it
    questions = load_quiz(cid)
    chosen = read_letters(questions, letters)
    recorded = "".join("?" if c is None else LETTERS[c] for c in chosen)
    missing = [n for n, c in enumerate(chosen, 1) if c is None]
    print(f"quiz {cid}, recorded: " + ", ".join(f"{n} {ch}" for n, ch in enumerate(recorded, 1)))
    if missing:
        which = f"question{'s' * (len(missing) > 1)} {', '.join(map(str, missing))}"
        print(f"{len(missing)} of {len(questions)} still unanswered ({which}): write a letter for each between the "
              "quotes")
    else:
        print(f"all {len(questions)} answered")
    HANDED_IN[cid] = recorded
    return recorded


def handed_in_marks(chapter: str | int, letters: str | None) -> tuple[list[bool | None], str]:
    """Per question of a hand-in (True right, False wrong, None unanswered), and why nothing counts (``""`` when it
    does): ``letters`` None (not handed in) or refused by :func:`read_letters` leave every question unanswered."""
    questions = load_quiz(chapter)
    if letters is None:
        return [None] * len(questions), "quiz not handed in"
    try:
        return marks(questions, letters), ""
    except ValueError as exc:
        return [None] * len(questions), f"quiz not handed in: {exc}"


def quiz_score(chapter: str | int, letters: str | None) -> tuple[int, int, str]:
    """``(right, questions, message)`` of a hand-in's ``letters`` (None: not handed in); the message names the
    questions right, wrong and unanswered, never the right letters. Letters :func:`read_letters` refuses score 0."""
    got, why = handed_in_marks(chapter, letters)
    if why:
        return 0, len(got), why
    right = sum(m is True for m in got)
    parts = [f"{what}: {', '.join(str(n) for n, m in enumerate(got, 1) if m is value)}"
             for what, value in (("right", True), ("wrong", False), ("unanswered", None)) if value in got]
    return right, len(got), f"{right} of {len(got)} right (questions {'; '.join(parts)})"


# ---------------------------------------------------------------------------------------------------------
# the instructors' page: every quiz with the belief each wrong option stands for
def chapter_titles(directory: str = "notebooks") -> dict[str, str]:
    """``{"03": "Multi-head attention", ...}``: each chapter's first ``# NN · Title`` heading."""
    import json
    from pathlib import Path

    titles = {}
    for path in sorted(Path(directory).glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        for cell in cells:
            text = "".join(cell["source"]) if cell["cell_type"] == "markdown" else ""
            found = re.search(r"^# (\d\d) · (.+)$", text, re.M)
            if found:
                titles[found.group(1)] = found.group(2).strip()
                break
    return titles


def instructor_markdown(titles: dict[str, str] | None = None) -> str:
    """A page listing, chapter by chapter, what each quiz question tests and why every wrong answer is wrong."""
    titles = titles or {}
    out = ["# Quizzes: the misconceptions they target", "",
           "Every chapter ends with a quiz. Each question aims at one belief learners commonly hold; each wrong",
           "option *is* that belief, and its feedback says why it is wrong. Use them as warm-up questions at the",
           "start of a session, or as exit tickets at its end. This page is generated from `tfm_lesson/course/quizzes/`",
           "(`python -m tfm_lesson.course.quiz book/instructors_quizzes.md`); a test keeps it in step.", ""]
    for cid in quiz_chapters():
        out += [f"## {cid} · {titles.get(cid, 'chapter ' + cid)}", ""]
        for n, q in enumerate(load_quiz(cid), 1):
            out.append(f"{n}. **{q.prompt}**")
            out.append(f"   - Right: *{q.options[q.answer]}* — {q.feedback[q.answer]}")
            for i, (option, why) in enumerate(zip(q.options, q.feedback)):
                if i != q.answer:
                    out.append(f"   - Wrong belief: *{option}* — {why}")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """``python -m tfm_lesson.course.quiz OUT.md``: write the instructors' quiz page (atomically)."""
    import sys
    from pathlib import Path

    from .._io import atomic_open

    args = sys.argv[1:] if argv is None else argv
    usage = "usage: python -m tfm_lesson.course.quiz OUT.md   (writes the instructors' page of every quiz)"
    if args in (["-h"], ["--help"]):
        print(usage)
        return 0
    if len(args) != 1 or args[0].startswith("-"):
        print(usage, file=sys.stderr)
        return 2
    out = Path(args[0])
    text = instructor_markdown(chapter_titles())
    with atomic_open(out, "w") as f:
        f.write(text)
    print(f"wrote {out} ({len(quiz_chapters())} chapters)")
    return 0


if __name__ == "__main__":
    from tfm_lesson.course.quiz import main as _main  # the package's own module, whose Question the quiz files use

    raise SystemExit(_main())
