"""``python -m statestream``: the command line (``statestream --help``)."""

import sys

from statestream.cli import main

sys.exit(main())
