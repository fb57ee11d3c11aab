"""Stage 9, commands: the command line and what each command orchestrates (`run`, `plan`,
`worker`, `export`, `list`, `validate`, ...). The only stage that reads argv: it turns arguments into
a `suite.config.request.Request` and hands that down."""
