"""`python -m kbert.cli`: the `kbert` command."""

import sys

from kbert.cli import main

sys.exit(main())
