"""Caps on a whole submission (tfm_lesson/course/sandbox_limits.py): a fork bomb, many processes each under the
per-process memory limit but over the total, and a disk filler each cost their own exercise, with the reason, while
a classmate graded beside them keeps full marks; nothing they started outlives the run, and no cgroup or mount is
left behind."""
from __future__ import annotations

import copy
import csv
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from tfm_lesson.course import copy_chapter_answers
from tfm_lesson.course.grading import exercises
from tfm_lesson.course.sandbox_limits import Cgroups, Guard, Limits, ScratchDisk, _own_cgroups

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = ROOT / "notebooks" / "03_multi_head_attention.ipynb"
MARK = f"tfm-limits-test-{secrets.token_hex(4)}"  # in the command line of every process the hostile cells start

_probe = Guard(Limits())
_probe.stop()
HAVE_CGROUPS = _probe.cgroups is not None
needs_cgroups = pytest.mark.skipif(not HAVE_CGROUPS, reason=f"no cgroup can be made here ({_probe.why_not})")

BOMB = f"""\
import subprocess, sys, time
bomb = "import os\\nwhile True:\\n    try:\\n        os.fork()\\n    except OSError:\\n        pass\\n"
subprocess.Popen([sys.executable, "-c", bomb, "{MARK}"])
time.sleep(60)
"""
HOGS = f"""\
import subprocess, sys, time
hog = "import time\\nb = b'x' * (200 * 2**20)\\ntime.sleep(60)\\n"  # 200 MB each, far under --memory
hogs = [subprocess.Popen([sys.executable, "-c", hog, "{MARK}"]) for _ in range(8)]
time.sleep(60)
"""
FILLER = """\
k = 0
while True:
    with open(f"filler-{k}.bin", "wb") as f:
        f.write(b"0" * 2**20)
    k += 1
"""


CHAPTER_NB = nbformat.read(CHAPTER, as_version=4)


def _with(nb, number: int, source: str):
    """``nb`` with ``source`` in exercise ``number``'s "your turn" cell (the chapter's solution cell stays)."""
    out = copy.deepcopy(nb)
    out["cells"][exercises(CHAPTER_NB)[number - 1].answer_index]["source"] = source
    return nbformat.from_dict(out)


def _marked() -> list[int]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if MARK in " ".join(proc.info["cmdline"] or []):
            found.append(proc.pid)
    return found


def _engine_or_why(engine: str) -> str | None:
    """Why ``engine`` cannot grade here (None when it can)."""
    if engine == "bwrap":
        return None if HAVE_CGROUPS else f"no cgroup can be made here ({_probe.why_not})"
    from tfm_lesson.course.sandbox import SandboxUnavailable
    from tfm_lesson.course.sandbox_container import check_engine

    try:
        check_engine(engine)
    except SandboxUnavailable as exc:
        return str(exc)
    return None


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["bwrap", "podman", "docker"])
def test_a_submission_over_its_caps_loses_that_exercise_and_nobody_else_does(tmp_path, engine):
    """In bubblewrap (capped by cgroups made for each kernel) and in a Podman or Docker container (capped by the
    container's own), wherever each can run."""
    why = _engine_or_why(engine)
    if why is not None:
        pytest.skip(why)
    right = copy_chapter_answers(CHAPTER_NB)
    subs = tmp_path / "subs"
    subs.mkdir()
    nbformat.write(nbformat.from_dict(right), subs / "victim.ipynb")
    nbformat.write(_with(right, 1, BOMB), subs / "fork_bomb.ipynb")
    nbformat.write(_with(right, 2, HOGS), subs / "hogs.ipynb")
    nbformat.write(_with(right, 3, FILLER), subs / "filler.ipynb")
    grader = subprocess.Popen(
        [sys.executable, "-m", "tfm_lesson.course", "grade", str(CHAPTER), str(subs), "--csv", str(tmp_path / "g.csv"),
         "--feedback", str(tmp_path / "feedback"), "--timeout", "90", "--jobs", "2", "--processes", "64",
         "--memory-total", "1024", "--disk", "64", "--sandbox", engine], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    out, err = grader.communicate(timeout=900)
    assert grader.returncode == 0, err
    assert "64 processes and threads (cgroup)" in out and "1024 MB of memory in all (cgroup)" in out
    with open(tmp_path / "g.csv", newline="") as f:
        table = {(Path(r["submission"]).stem, int(r["exercise"].split()[1].rstrip(":"))): r for r in csv.DictReader(f)
                 if r["exercise"].startswith("Exercise")}  # the quiz's line has its own tests
    assert [table[("victim", n)]["points"] for n in (1, 2, 3)] == ["3", "3", "3"]
    hit = {"fork_bomb": (1, "started more than 64 processes"), "hogs": (2, "used more than 1024 MB of memory in all"),
           "filler": (3, "wrote more than 64 MB of files")}
    for name, (number, reason) in hit.items():
        assert table[(name, number)]["points"] == "0" and reason in table[(name, number)]["message"], table[(name, number)]
        others = [table[(name, n)]["points"] for n in (1, 2, 3) if n != number]
        assert others == ["3", "3"], (name, others, [table[(name, n)]["message"] for n in (1, 2, 3)])
        page = next(p for p in (tmp_path / "feedback").iterdir() if name in p.name).read_text()
        assert reason in page
    time.sleep(1)
    assert _marked() == [], "a process a submission started outlived its grade"
    for folder in (_own_cgroups() or ("", {}))[1].values():
        left = [p.name for p in folder.iterdir() if p.name.startswith(f"tfm-grade-{grader.pid}-")]
        assert left == [], f"cgroups left behind in {folder}"
    assert "tfm-grade" not in Path("/proc/mounts").read_text()
    if engine != "bwrap":
        listed = subprocess.run([engine, "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True)
        assert f"tfm-grade-{grader.pid}-" not in listed.stdout, "a container outlived its kernel"


@needs_cgroups
def test_the_cgroups_of_one_kernel_cap_its_processes_and_go_away(tmp_path):
    """The pieces alone: a command started through :meth:`Cgroups.wrap` is in them, cannot fork past the cap, and
    the hit is told; :meth:`Cgroups.remove` leaves nothing."""
    group = Cgroups.make(Limits(processes=10, memory_mb=256, disk_mb=0))
    try:
        code = ("import os, time\nn = 0\ntry:\n    for _ in range(50):\n        if os.fork() == 0:\n"
                "            os.closerange(1, 3)\n            time.sleep(30)\n            os._exit(0)\n"
                "        n += 1\nexcept OSError:\n    pass\nprint(n)\n")  # its children outlive it, in the cgroup
        done = subprocess.run(group.wrap([sys.executable, "-c", code, MARK]), capture_output=True, text=True,
                              timeout=60)
        assert int(done.stdout) < 10, done.stdout
        assert group.pids() and "more than 10 processes" in group.hit()
    finally:
        group.remove()
    assert not any(folder.exists() for folder in group.folders.values())
    assert _marked() == []


def test_caps_below_zero_are_refused():
    with pytest.raises(ValueError, match="processes must be >= 0"):
        Limits(processes=-1)


def test_a_disk_without_a_mount_is_summed(tmp_path):
    """Where the grader may not mount (not root), the folder's files are summed: the cap is told once they reach it."""
    disk = ScratchDisk(tmp_path, 2)
    limits = Limits(disk_mb=2)
    (tmp_path / "a").write_bytes(os.urandom(2 ** 19))
    assert disk.hit(limits) is None
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b").write_bytes(os.urandom(2 ** 20))
    assert "wrote more than 2 MB" in disk.hit(limits)
    disk.clear(tmp_path)
    assert list(tmp_path.iterdir()) == [] and disk.hit(limits) is None


FORKS = """\
import importlib.util, os, sys, time
spec = importlib.util.spec_from_file_location("grade_kernel", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
module.apply_limits(["--processes", "20", "-f", "connection.json"])
n = 0
try:
    for _ in range(60):
        if os.fork() == 0:
            time.sleep(20)
            os._exit(0)
        n += 1
except OSError:
    pass
print(n)
"""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("bwrap") or not shutil.which("setpriv"),
                    reason="needs root (to run the sandbox as another user), bubblewrap and setpriv")
def test_without_cgroups_the_process_cap_counts_only_the_sandboxes_own():
    """The rlimit fallback, for a grader that is not root (here user nobody): ``--processes 20`` set by the kernel
    inside its sandbox refuses its 20th process even while the same user runs 40 others outside, which an
    ``RLIMIT_NPROC`` set before the sandbox would have counted; for a grader run as root it refuses nothing."""
    import tempfile

    kernel_file = ROOT / "tfm_lesson" / "course" / "_grade_kernel.py"
    with tempfile.NamedTemporaryFile("w", suffix=".py", prefix="tfm-forks-", dir="/tmp", delete=False) as f:
        f.write(FORKS)  # in /tmp itself: pytest's own folders are the grader's, closed to nobody
    forks = Path(f.name)
    forks.chmod(0o644)
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    idle = [*as_nobody, "/usr/bin/python3", "-c", "import time; time.sleep(30)", MARK]
    outside = [subprocess.Popen(idle) for _ in range(40)]
    sandbox = ["bwrap", "--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534", "--cap-drop", "ALL",
               "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    run = [*sandbox, "/usr/bin/python3", str(forks), str(kernel_file), MARK]
    try:
        as_user = subprocess.run([*as_nobody, *run], capture_output=True, text=True, timeout=120)
        as_root = subprocess.run(run, capture_output=True, text=True, timeout=120)
    finally:
        forks.unlink()
        for proc in outside:
            proc.kill()
            proc.wait()
    assert as_user.returncode == 0, as_user.stderr
    assert 10 <= int(as_user.stdout) < 20  # its own processes counted (the python and its children), not the 40
    assert int(as_root.stdout) == 60  # root: never refused, hence the cgroup


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_the_cgroup_files_of_either_version(tmp_path, version):
    """Where each version keeps what the guard reads and writes, on a tree shaped like /sys/fs/cgroup (the kernel's
    own behaviour is the tests above, on this machine's version): the cgroups go under the grader's own, with the
    caps written, a refused fork and an out-of-memory kill told apart, and nothing left after."""
    from tfm_lesson.course.sandbox_limits import _own_cgroups

    proc = tmp_path / "cgroup"
    if version == "v1":
        proc.write_text("8:pids:/grader\n4:memory:/jobs/grader\n0::/\n")
        for folder in ("pids/grader", "memory/jobs/grader"):
            (tmp_path / folder).mkdir(parents=True)
        expected = {"pids": tmp_path / "pids/grader", "memory": tmp_path / "memory/jobs/grader"}
    else:
        proc.write_text("0::/user.slice/grader\n")
        (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
        (tmp_path / "user.slice/grader").mkdir(parents=True)
        (tmp_path / "user.slice/grader/cgroup.subtree_control").write_text("")
        expected = {"": tmp_path / "user.slice/grader"}
    assert _own_cgroups(tmp_path, proc) == (version, expected)
    limits = Limits(processes=30, memory_mb=100, disk_mb=0)
    group = Cgroups.make(limits, tmp_path, proc)
    pids, memory = group._folder("pids"), group._folder("memory")
    assert all(folder.parent in expected.values() for folder in group.folders.values())
    assert (pids / "pids.max").read_text() == "30"
    assert (memory / ("memory.max" if version == "v2" else "memory.limit_in_bytes")).read_text() == str(100 * 2**20)
    if version == "v2":
        assert (tmp_path / "user.slice/grader/cgroup.subtree_control").read_text() == "+memory +pids"
    assert group.hit() is None
    (pids / "pids.events").write_text("max 0\n")
    (memory / ("memory.events" if version == "v2" else "memory.oom_control")).write_text("oom 1\noom_kill 1\n")
    assert "used more than 100 MB of memory in all" in group.hit()
    (pids / "pids.events").write_text("max 3\n")
    assert "more than 30 processes" in group.hit()
    group.kill()  # nothing in them (v2: cgroup.kill written)
    if version == "v2":
        assert (group.folders[""] / "cgroup.kill").read_text() == "1"
    group.kill = lambda: None  # a real cgroup's files go with it; here they are removed by hand
    for folder in group.folders.values():
        for file in folder.iterdir():
            file.unlink()
    group.remove()
    assert not any(folder.exists() for folder in group.folders.values())
