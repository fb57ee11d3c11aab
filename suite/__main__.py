from suite.commands.cli import main

raise SystemExit(main())
