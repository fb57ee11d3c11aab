from suite.commands.cli import entry

raise SystemExit(entry())
