"""The questions of each chapter's quiz: ``chNN.py`` defines ``QUESTIONS`` (see :mod:`tfm_lesson.course.quiz`)."""
