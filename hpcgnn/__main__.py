import sys

from hpcgnn.cli.main import main

sys.exit(main())
