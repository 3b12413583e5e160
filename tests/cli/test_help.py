"""`kbert ... --help`: every option states its default, every command shows example command
lines that parse, and `--hybrid` has one form everywhere."""

import argparse
import shlex

import pytest

from kbert import cli
from kbert.cli.app import app_server


def _commands(parser, name="kbert"):
    """(name, parser) for the `kbert` parser and every subcommand under it, depth first."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _commands(sub, f"{name} {sub_name}")


COMMANDS = dict(_commands(cli.build_parser()))


def _required(parser):
    """The options that must be given: required ones and those of a required `one of` group."""
    required = {a for a in parser._actions if a.required}
    for group in parser._mutually_exclusive_groups:
        if group.required:
            required.update(group._group_actions)
    return required


def _options(parser):
    """The options whose help should state a default: not -h, not hidden, not required, not a
    switch (a switch is off unless given)."""
    required = _required(parser)
    return [a for a in parser._actions
            if a.option_strings and a.help is not argparse.SUPPRESS and a.nargs != 0
            and not isinstance(a, argparse._HelpAction) and a not in required]


def _help(parser, action):
    """An option's help as --help prints it (the formatter's defaults added)."""
    return parser._get_formatter()._expand_help(action)


def _examples(parser):
    """The command lines of a parser's epilog (`common.examples`): each line `  kbert ...` and
    the lines it runs on to with ` \\`."""
    commands, more = [], False
    for line in (parser.epilog or "").splitlines():
        if more:
            commands[-1] += " " + line.strip()
        elif line.startswith("  kbert "):
            commands.append(line.strip())
        else:
            continue
        more = commands[-1].endswith(" \\")
        commands[-1] = commands[-1].removesuffix(" \\")
    return commands


def test_the_walk_finds_every_command():
    assert {"kbert index build", "kbert index search", "kbert finetune", "kbert pretrain",
            "kbert experiments features", "kbert create-pretraining-data"} <= set(COMMANDS)
    assert len(COMMANDS) == 21            # kbert, its 13 commands, index 3, experiments 2, cache 2


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_option_states_its_default(name):
    parser = COMMANDS[name]
    for action in _options(parser):
        text = _help(parser, action)
        assert "default" in text.lower(), f"{name} {action.option_strings[0]}: {text!r}"
        if action.default not in (None, []):    # a value: the one the parser has
            assert str(action.default).lower() in text.lower(), (
                f"{name} {action.option_strings[0]}: default {action.default!r} vs {text!r}")
        assert "(default: None)" not in text and "(default: [])" not in text


def test_defaults_shown_in_the_printed_help():
    printed = " ".join(COMMANDS["kbert pretrain"].format_help().split())
    for option, default in [("--steps", 1000), ("--batch-size", 32), ("--learning-rate", 0.0001)]:
        assert f"(default: {default})" in printed, option
    printed = " ".join(COMMANDS["kbert create-pretraining-data"].format_help().split())
    assert "passes over the input, each with different masks (default: 10)" in printed
    printed = " ".join(COMMANDS["kbert finetune"].format_help().split())
    assert "examples per update (default: 32)" in printed
    assert "peak learning rate (default 3e-5; retrieve, rerank: 2e-5)" in printed
    assert "(default: None)" not in printed


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_shows_examples_that_parse(name, capsys):
    parser = COMMANDS[name]
    commands = _examples(parser)
    assert commands, f"{name}: no example in its epilog"
    if name != "kbert":
        assert any(c.startswith(name + " ") or c == name for c in commands), (name, commands)
    assert "\n  kbert " in parser.format_help()        # printed, line breaks kept
    for command in commands:
        if command.startswith("kbert app ") and app_server() is None:
            continue                                   # the playground's options need gradio
        try:
            args = cli.build_parser().parse_args(shlex.split(command)[1:])
        except SystemExit:
            pytest.fail(f"{name}: example does not parse: {command}\n{capsys.readouterr().err}")
        assert callable(args.func)


# --- --hybrid: one form, `--hybrid [{on,off}]`, in every command that has it --------------------
HYBRID_COMMANDS = ("kbert index build", "kbert index search", "kbert evaluate")


def _hybrid(parser):
    return next(a for a in parser._actions if "--hybrid" in a.option_strings)


@pytest.mark.parametrize("name", HYBRID_COMMANDS)
def test_hybrid_has_one_form(name):
    action = _hybrid(COMMANDS[name])
    assert (action.nargs, action.const, tuple(action.choices)) == ("?", "on", ("on", "off"))
    assert "--hybrid [{on,off}]" in COMMANDS[name].format_usage()
    assert "a bare --hybrid is on" in _help(COMMANDS[name], action)


def _parse(*argv):
    return cli.build_parser().parse_args(list(argv))


@pytest.mark.parametrize("form, value", [((), "off"), (("--hybrid",), "on"),
                                         (("--hybrid", "on"), "on"), (("--hybrid=off",), "off")])
def test_hybrid_forms_in_build_and_evaluate(form, value):
    build = ["index", "build", "a.txt", "--model", "m", "--output", "o"]
    assert _parse(*build, *form).hybrid == value
    assert _parse("evaluate", "retrieve", "--model", "m", "--data", "d.json", *form).hybrid == value


def test_a_bare_hybrid_before_a_positional_is_the_switch_it_was():
    args = _parse("index", "build", "--hybrid", "a.txt", "b.txt", "--model", "m", "--output", "o")
    assert args.hybrid == "on" and args.files == ["a.txt", "b.txt"]
    args = _parse("evaluate", "--hybrid", "retrieve", "--model", "m", "--data", "d.json")
    assert args.hybrid == "on" and args.task == "retrieve"
    args = _parse("index", "search", "--hybrid", "idx", "a query")
    assert (args.hybrid, args.index, args.query) == ("on", "idx", ["a query"])


@pytest.mark.parametrize("form, value", [((), None), (("--hybrid",), "on"),
                                         (("--hybrid", "on"), "on"), (("--hybrid", "off"), "off")])
def test_hybrid_forms_in_search(form, value):
    assert _parse("index", "search", "idx", "a query", *form).hybrid == value
    assert _parse("index", "search", "idx", *form, "--json", "a query").hybrid == value


def test_a_bad_hybrid_value_is_refused(capsys):
    with pytest.raises(SystemExit) as e:
        _parse("index", "search", "idx", "q", "--hybrid=yes")
    assert e.value.code == 2
    assert "argument --hybrid: invalid choice: 'yes'" in capsys.readouterr().err
