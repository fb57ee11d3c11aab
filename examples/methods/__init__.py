"""Two fine-tuning methods from the literature, written as a user writes one: only through the
suite's method interface (`suite.model.methods`, docs/methods.md). Run from `examples/`, where
`methods` imports as a package from the current directory:

    cd examples && suite run rte --sweep methods/methods.yaml --profile smoke --size 32
"""
