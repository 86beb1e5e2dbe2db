"""python3 -m accelrt: see cli.py."""
import sys

from .cli import main

sys.exit(main())
