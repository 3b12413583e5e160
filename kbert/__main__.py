import sys

from kbert.cli import main

sys.exit(main())
