"""Where the golden catalog these tests read is: MLA_GOLDENS_DIR, else the repository's copy.

A module of its own (not conftest.py), so that the test files import it by a name no other test
tree of the repository uses: pytest runs reference/python and reports/tools/tests in one session.
"""
import os

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
GOLDENS = os.environ.get("MLA_GOLDENS_DIR", os.path.join(REPO, "fixtures", "goldens"))
