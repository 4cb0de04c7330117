"""``python -m chainpipe``: the command line (:func:`chainpipe.cli.main`)."""

import sys

try:
    from .cli import main
except KeyboardInterrupt:  # Ctrl-C while Python is still importing: no traceback either
    print("interrupted", file=sys.stderr)
    raise SystemExit(130) from None

raise SystemExit(main())
