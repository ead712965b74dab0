"""Commands: the argument parsing and printing of every `python -m pipeline` command.

One module per stage or command. Each command `name` is a pair of functions, `name_arguments(p)`
(adds its arguments to its argparse sub-parser) and `name(args) -> int` (runs it);
`pipeline.cli` registers every command from one table. The stages themselves take
typed values, never an argv.
"""
