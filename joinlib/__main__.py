import sys

from joinlib.cli.main import main

sys.exit(main())
