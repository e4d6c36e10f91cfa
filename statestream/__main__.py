"""``python -m statestream``: the command line (``statestream --help``)."""

import sys

from statestream.commands.cli import main

sys.exit(main())
