"""The second half of the notebooks, executed as tests/test_notebooks.py executes the first:
the same tests (``executing_tests``), in a file of their own so that pytest-xdist
(``--dist loadfile``) runs the two halves on two workers at once. ``HALVES`` splits the
notebooks by their stated run times."""

from tests.test_notebooks import HALVES, executing_tests

test_notebook_executes, test_stored_outputs_are_current, test_notebook_states_its_run_time = \
    executing_tests(HALVES[1])
