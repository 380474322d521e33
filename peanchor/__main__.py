import sys

from peanchor.cli import main

sys.exit(main())
