"""Downloadable scripts of Inside Ray (docs/inside-ray/): each run, compared with its page.

The checks are in ``tests/test_take_away.py``; one file per group lets pytest-xdist,
which hands out whole files, run the groups side by side.
"""

import pytest

from tests.test_take_away import check_script, script_params


@pytest.mark.parametrize("page", script_params("inside_ray"))
def test_the_script_prints_what_the_page_shows(page, tmp_path):
    check_script(page, tmp_path)
