"""Checks servetune's generated sglang command lines against sglang's own argument definitions.

Usage: python sglang_flags.py ARGV_JSON
ARGV_JSON holds a list of argv lists, each starting `python -m sglang.launch_server`.

First tries sglang's real parser (ServerArgs.add_cli_args); with sglang installed without its
dependencies (`pip install --no-deps`, as the test venv has it) that import needs torch, so it
falls back to reading the flag definitions out of the installed sources with the ast module:
every `A[T, Arg(...)]` / `A[T, "help"]` field of sglang/srt/arg_groups/fields/*.py (the flag is
the field name with dashes, or Arg's cli_name, plus its aliases; no_cli fields have none; a bool
field is a switch), and every `parser.add_argument("--...")` call in server_args.py. Prints which
way was used, then "ok N commands".
"""

import argparse
import ast
import json
import os
import sys


def real_parser():
    from sglang.srt.server_args import ServerArgs

    p = argparse.ArgumentParser()
    ServerArgs.add_cli_args(p)
    return p


def _kw(call, name):
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return None


def _flags_of_field(target, ann):
    """(names, takes_value) of one annotated dataclass field, or None without a CLI flag."""
    if not (isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Name) and ann.value.id == "A"):
        return None
    parts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
    typ = ast.unparse(parts[0])
    names = ["--" + target.replace("_", "-")]
    takes_value = typ not in ("bool", "Optional[bool]", "bool | None")
    for meta in parts[1:]:
        if isinstance(meta, ast.Call) and ast.unparse(meta.func) == "Arg":
            no_cli = _kw(meta, "no_cli")
            if isinstance(no_cli, ast.Constant) and no_cli.value is True:
                return None
            cli = _kw(meta, "cli_name")
            if isinstance(cli, ast.Constant):
                names = [cli.value]
            aliases = _kw(meta, "aliases")
            if isinstance(aliases, ast.List):
                names += [e.value for e in aliases.elts if isinstance(e, ast.Constant)]
            action = _kw(meta, "action")
            if action is not None and "store_true" in ast.unparse(action):
                takes_value = False
    return names, takes_value


def ast_flags(root):
    flags = {}
    fields = os.path.join(root, "srt", "arg_groups", "fields")
    for f in sorted(os.listdir(fields)):
        if not f.endswith(".py"):
            continue
        tree = ast.parse(open(os.path.join(fields, f)).read())
        for node in ast.walk(tree):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                got = _flags_of_field(node.target.id, node.annotation)
                if got:
                    for n in got[0]:
                        flags[n] = got[1]
    tree = ast.parse(open(os.path.join(root, "srt", "server_args.py")).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("add_argument"):
            names = [a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
            action = _kw(node, "action")
            switch = action is not None and ("StoreTrue" in ast.unparse(action) or "store_true" in ast.unparse(action))
            for n in names:
                flags[n] = not switch
    return flags


def check_with_ast(cmds):
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    root = os.path.dirname(spec.origin)
    flags = ast_flags(root)
    assert len(flags) > 200, f"only {len(flags)} flags read from {root}: the source layout changed"
    for argv in cmds:
        args = argv[3:]
        i = 0
        while i < len(args):
            a = args[i]
            assert a in flags, f"{a} is not an sglang flag ({' '.join(argv)})"
            if flags[a]:
                assert i + 1 < len(args) and not args[i + 1].startswith("--"), f"{a} needs a value ({' '.join(argv)})"
                i += 2
            else:
                i += 1


def main():
    cmds = json.load(open(sys.argv[1]))
    assert cmds, "no sglang command to check"
    for argv in cmds:
        assert argv[:3] == ["python", "-m", "sglang.launch_server"], argv
    try:
        parser = real_parser()
    except ImportError as e:
        print(f"sglang's parser cannot be imported ({e}); reading its flag definitions with ast")
        check_with_ast(cmds)
    else:
        print("sglang's own parser")
        for argv in cmds:
            parser.parse_args(argv[3:])
    print(f"ok {len(cmds)} commands")


main()
