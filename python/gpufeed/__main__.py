"""``python -m gpufeed``: the same as the ``gpufeed`` command."""
import sys

from .cli import main

sys.exit(main())
