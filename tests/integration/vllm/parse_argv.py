"""Run INSIDE a CPU vLLM venv: parse argv lists with that release's real OpenAI-server argument parser.

    <venv>/bin/python parse_argv.py < cases.json > results.json

stdin: {"cases": {"<id>": ["--flag=value", ...], ...}}
stdout: {"version": vllm.__version__, "reasoning_parsers": [...], "tool_parsers": [...],
         "results": {"<id>": {"ok": bool, "error": str, "args": {dest: value}}}}

The parser is vllm.entrypoints.openai.cli_args.make_arg_parser over vLLM's FlexibleArgumentParser (what
`python -m vllm.entrypoints.openai.api_server` uses), followed by validate_parsed_serve_args; argparse's
exit on a bad flag is caught and reported per case. Parser names are checked against the release's own
registries (ReasoningParserManager / ToolParserManager.list_registered()).
"""

import contextlib
import io
import json
import sys

import vllm
from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.reasoning import ReasoningParserManager
from vllm.tool_parsers import ToolParserManager
from vllm.utils.argparse_utils import FlexibleArgumentParser


def _jsonable(value):
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


def main():
    cases = json.load(sys.stdin)["cases"]
    reasoning = sorted(ReasoningParserManager.list_registered())
    tools = sorted(ToolParserManager.list_registered())
    results = {}
    for case_id, argv in cases.items():
        parser = make_arg_parser(FlexibleArgumentParser(prog="vllm.entrypoints.openai.api_server"))
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr):
                args = parser.parse_args(["--model", "/models/checkpoint"] + argv)
                validate_parsed_serve_args(args)
            problems = []
            if args.reasoning_parser and args.reasoning_parser not in reasoning:
                problems.append("reasoning parser %r not registered" % args.reasoning_parser)
            if args.tool_call_parser and args.tool_call_parser not in tools:
                problems.append("tool parser %r not registered" % args.tool_call_parser)
            results[case_id] = {"ok": not problems, "error": "; ".join(problems),
                                "args": {k: _jsonable(v) for k, v in vars(args).items()}}
        except SystemExit as exc:
            results[case_id] = {"ok": False, "error": "argparse exit %s: %s" % (exc.code, stderr.getvalue().strip()[-600:]), "args": {}}
        except Exception as exc:  # pylint: disable=broad-except
            results[case_id] = {"ok": False, "error": "%s: %s" % (type(exc).__name__, exc), "args": {}}
    json.dump({"version": vllm.__version__, "reasoning_parsers": reasoning, "tool_parsers": tools, "results": results}, sys.stdout)


if __name__ == "__main__":
    main()
