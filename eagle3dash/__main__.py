"""`python -m eagle3dash`: see cli.py."""

import sys

from eagle3dash.cli import main

sys.exit(main())
