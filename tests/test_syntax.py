"""tfm_lesson._syntax: the grader's parses and replays keep cyclic garbage collection off, across threads."""
import gc
import threading

from tfm_lesson._syntax import no_collection, parse


def test_nested_guards_turn_collection_back_on_only_at_the_outermost():
    assert gc.isenabled()
    with no_collection():
        assert not gc.isenabled()
        with no_collection():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner one ended: the outer still holds
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled():
    gc.disable()
    try:
        with no_collection():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_threads_parsing_at_once_leave_collection_on_and_parse_right():
    trees, errors = [], []

    def work(n: int) -> None:
        try:
            for k in range(200):
                trees.append(type(parse(f"def f{n}_{k}(x):\n    return [y * {k} for y in x]\n").body[0]).__name__)
        except Exception as exc:  # pragma: no cover - what the test is for
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and trees == ["FunctionDef"] * 800
    assert gc.isenabled()
    assert parse("1 + 2", mode="eval").body.__class__.__name__ == "BinOp"
