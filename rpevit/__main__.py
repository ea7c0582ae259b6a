"""Command line: python -m rpevit {list,train,study,bench} …"""

from .cli import main

raise SystemExit(main())
