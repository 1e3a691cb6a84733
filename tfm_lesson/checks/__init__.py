"""Exercise checkers. Each takes the learner's function or class, tests it against the reference on
random shapes, masks and dtypes, prints one success line, or raises ``AssertionError`` (a
:class:`Mistake`) whose message names the likely mistake."""
from ._harness import Mistake
