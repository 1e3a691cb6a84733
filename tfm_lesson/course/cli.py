"""``python -m tfm_lesson.course``: the command line over the course tooling (execute, student, restore, fold,
setup-cell, grade, export).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .cells import CourseError
from .chapters import chapters, execute, fold_files, update_setup_cell
from .location import REF, REPOSITORY, check_location
from .sandbox_limits import DEFAULT_DISK_MB, DEFAULT_MEMORY_TOTAL_MB, DEFAULT_PROCESSES, Limits
from .student import restore_files, write_student_copies

def _check_notebook_argument(parser: argparse.ArgumentParser, path: Path) -> None:
    """Exit with a usage error (status 2) unless ``path`` is a readable ``.ipynb`` notebook."""
    import nbformat

    if path.is_dir():
        parser.error(f"{path} is a directory; give notebook files (e.g. {path}/NN_name.ipynb)")
    if not path.is_file():
        parser.error(f"no notebook at {path}")
    if path.suffix != ".ipynb":
        pair = "; the .py files are the jupytext pairs: give the .ipynb beside them" if path.suffix == ".py" else ""
        parser.error(f"{path} is not a notebook (.ipynb){pair}")
    try:
        nbformat.read(path, as_version=4)
    except Exception as exc:  # noqa: BLE001 - JSON, schema or encoding errors all mean the same to the user
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        parser.error(f"{path} is not a readable notebook ({first[:200]})")


def _limits(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Limits:
    """The caps on each whole submission, from --processes, --memory-total and --disk (a usage error below 0)."""
    try:
        return Limits(args.processes, args.memory_total, args.disk)
    except ValueError:
        parser.error("--processes, --memory-total and --disk must be >= 0 (0 = no cap)")


def class_main(argv: list[str]) -> int:
    """``grade`` and ``export``, the two class commands of ``python -m tfm_lesson.course``. Exit 0 when done,
    2 for a usage error (bad arguments, a chapter without solutions, a missing submission path, an output path that
    would overwrite something or cannot be written, a ``--memory`` the kernel cannot start under), 130 on Ctrl-C."""
    from . import grading
    from .export import export

    parser = argparse.ArgumentParser(prog="python -m tfm_lesson.course")
    sub = parser.add_subparsers(dest="command", required=True)
    gr = sub.add_parser("grade", help="grade student notebooks against the instructor's chapter",
                        description=grading.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    gr.add_argument("chapter", type=Path, help="the instructor's chapter (with solutions)")
    gr.add_argument("submissions", nargs="+", type=Path, help="student notebooks, or folders of them")
    gr.add_argument("--csv", type=Path, required=True,
                    help="where to write the grades (a new file, or with --resume the table of an earlier run); each "
                         "submission's rows are written as soon as it is graded")
    gr.add_argument("--feedback", type=Path, help="a folder for one Markdown feedback page per submission")
    gr.add_argument("--timeout", type=int, default=grading.DEFAULT_TIMEOUT, help="seconds per cell (default %(default)s)")
    gr.add_argument("--memory", type=int, default=grading.DEFAULT_MEMORY_MB,
                    help="MB of address space per kernel, 0 = no limit (default %(default)s)")
    gr.add_argument("--processes", type=int, default=DEFAULT_PROCESSES,
                    help="processes and threads one submission may run at once, 0 = no cap (default %(default)s); "
                         "past it its kernel is killed and the exercise scores 0 with the reason")
    gr.add_argument("--memory-total", type=int, default=DEFAULT_MEMORY_TOTAL_MB,
                    help="MB of memory all of one submission's processes may use together, its /tmp and its files "
                         "included, 0 = no cap (default %(default)s; a cgroup, where the grader may make one)")
    gr.add_argument("--disk", type=int, default=DEFAULT_DISK_MB,
                    help="MB of files one submission may write in its scratch folder, 0 = no cap "
                         "(default %(default)s)")
    gr.add_argument("--jobs", type=int, default=1, help="submissions graded at once (default 1)")
    gr.add_argument("--resume", action="store_true",
                    help="keep the grades already in --csv and grade only the submissions not in it")
    gr.add_argument("--seed", type=int, default=None,
                    help="the seed the checkers that draw their inputs from one use (default: a new one each run, "
                         "printed, so that outputs learnt by heart for the notebook's inputs do not pass)")
    gr.add_argument("--sandbox", choices=("auto", "bwrap", "podman", "docker", "none"), default="auto",
                    help="where each submission's kernel runs: bubblewrap, a Podman or Docker container made of this "
                         "machine's own files (run as root; nothing is pulled), or none; auto (the default): "
                         "bubblewrap, else Podman, else Docker, else refuse")
    gr.add_argument("--no-sandbox", action="store_true",
                    help="run student code without any sandbox (with your own rights; said on every report); the "
                         "same as --sandbox none")
    gr.add_argument("--no-solutions", action="store_true",
                    help="never run the chapter's solution in a student's kernel (by default it replaces the answer "
                         "to an exercise that failed, so later exercises get working pieces, and that student's "
                         "code can read it); a bug then costs every exercise that uses it")
    gr.add_argument("--no-quiz", action="store_true",
                    help="leave out the quiz line (\"Quiz NN\": a point per right letter the learner wrote into the "
                         "cell after the chapter's quiz); by default it is graded and counts in the totals")
    ex = sub.add_parser("export", help="write the chapter as an nbgrader or Otter-Grader assignment")
    ex.add_argument("chapter", type=Path)
    ex.add_argument("--format", choices=("nbgrader", "otter"), required=True)
    ex.add_argument("--out", type=Path, required=True, help="the nbgrader course folder, or the otter folder")
    ex.add_argument("--assignment", help="the assignment's name (default: the chapter's file name)")
    ex.add_argument("--timeout", type=int, default=600,
                    help="seconds a cell may run when the tool grades (default %(default)s)")
    ex.add_argument("--force", action="store_true",
                    help="replace an earlier export even if it was edited (never the chapter itself)")
    try:
        args = parser.parse_args(argv)
        limits = _limits(parser, args) if args.command == "grade" else None
    except SystemExit as exc:
        return 2 if exc.code else 0
    try:
        if args.command == "grade":
            grading.grade(args.chapter, args.submissions, args.csv, args.feedback, args.timeout, args.memory, args.jobs,
                          sandbox="none" if args.no_sandbox else args.sandbox, resume=args.resume, seed=args.seed,
                          limits=limits, quiz=not args.no_quiz, solutions=not args.no_solutions)
        else:
            export(args.chapter, args.format, args.out, args.assignment, args.timeout, args.force)
    except CourseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # grade said what it kept
        return 130
    return 0


# the commands that moved to tools/book.py (they read or write the checkout's book/, README and notebooks/)
_MOVED = {"book": "build", "badges": "badges", "colab-links": "colab-links"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfm_lesson.course", description=sys.modules[__package__].__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("execute", help="execute notebooks in place")
    ex.add_argument("notebooks", nargs="+", type=Path)
    ex.add_argument("--timeout", type=int, default=600)
    st = sub.add_parser("student", help="write student copies (solutions replaced by stubs)")
    st.add_argument("notebooks", nargs="*", type=Path, help="chapters (default: every chapter in notebooks/)")
    st.add_argument("--out", type=Path, default=Path("student"),
                    help="folder for the copies (default %(default)s/); its name is also the folder each copy's Colab "
                         "badge opens in the repository, so publish the copies under that name")
    st.add_argument("--force", action="store_true", help="overwrite earlier student copies even if changed")
    st.add_argument("--repository", help=f"OWNER/NAME on GitHub the copies install from and link to "
                                         f"(default {REPOSITORY})")
    st.add_argument("--ref", help=f"the tag, branch or commit there (default {REF})")
    rs = sub.add_parser("restore", help="put the solutions back into student copies, in place")
    rs.add_argument("notebooks", nargs="+", type=Path)
    rs.add_argument("--from", dest="originals", type=Path, default=Path("notebooks"))
    fd = sub.add_parser("fold", help="fold the solution cells of notebooks, in place (metadata only)")
    fd.add_argument("notebooks", nargs="+", type=Path)
    su = sub.add_parser("setup-cell", help="bring each chapter's set-up cell (and its .py pair) up to date")
    su.add_argument("notebooks", nargs="+", type=Path)
    # a class's commands have their own parser (class_main): listed here so that --help names them
    sub.add_parser("grade", help="grade a class's submissions of a chapter (grade --help)", add_help=False)
    sub.add_parser("export", help="a chapter as an nbgrader or Otter assignment (export --help)", add_help=False)
    sub.add_parser("gradebook", help="a class's gradebook, and Canvas / Gradescope / Moodle files (gradebook --help)",
                   add_help=False)
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] in ("grade", "export"):  # a class's notebooks: course/grading.py, course/export.py
        return class_main(argv)
    if argv and argv[0] == "gradebook":  # the term's scores from grades CSVs: course/gradebook*.py
        from .gradebook_cli import gradebook_main

        return gradebook_main(argv[1:])
    if argv and argv[0] in _MOVED:
        print(f"error: `{argv[0]}` needs the course's checkout and moved out of the package: run "
              f"`python tools/book.py {_MOVED[argv[0]]}` there", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    for path in getattr(args, "notebooks", None) or ():  # a clear usage error, not a traceback from nbformat
        _check_notebook_argument(parser, path)
    try:
        if args.command == "execute":
            execute(args.notebooks, args.timeout)
        elif args.command == "student":
            if args.repository is not None or args.ref is not None:
                check_location(args.repository or REPOSITORY, args.ref or REF)
            write_student_copies(args.notebooks or chapters(), args.out, force=args.force,
                                 repository=args.repository, ref=args.ref)
        elif args.command == "restore":
            restore_files(args.notebooks, args.originals)
        elif args.command == "fold":
            fold_files(args.notebooks)
        elif args.command == "setup-cell":
            for path in args.notebooks:
                print(f"{path}: set-up cell {'updated' if update_setup_cell(path) else 'already current'}")
    except CourseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
