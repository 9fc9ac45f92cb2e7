"""``python -m harness``: see :mod:`harness.cli`.

``python -m`` puts the working directory first on ``sys.path``, so a ``json.py``, ``random.py`` or
``optimizers.py`` beside a sweep config (an optimizer ``source``, run from its folder) would be what
the harness and its libraries import. The entry is dropped here, before anything else is imported,
unless it is the folder that holds ``harness`` itself (a checkout run from its root, not installed).
A user's file still imports its neighbours: :func:`harness.core.source.load_module` puts its folder
last on ``sys.path`` while it runs.
"""

import os
import sys

if sys.path and sys.path[0] in ("", os.getcwd()) and \
        os.path.abspath(sys.path[0] or ".") != os.path.dirname(os.path.dirname(os.path.abspath(__file__))):
    del sys.path[0]

from harness.cli import main  # after the working directory left sys.path

if __name__ == "__main__":
    main()
