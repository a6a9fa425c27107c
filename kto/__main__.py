import sys

from kto import cli

sys.exit(cli.main())
