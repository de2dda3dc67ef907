"""``asyncnet ops [TYPE]``: list registered operators with their schemas and docs."""

from __future__ import annotations

import argparse

from asyncnet.core.registry import OpSchema, get_schema, registered_ops


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ops", help="list operators and their schemas")
    p.add_argument("type", nargs="?", help="show one operator in full")
    p.set_defaults(handler=run)


def describe(schema: OpSchema) -> str:
    """A multi-line description of one operator schema."""
    lines = [f"{schema.type}  ({schema.arity_text()}; devices: {', '.join(schema.devices)}"
             f"{'; differentiable' if schema.differentiable else ''})", f"  {schema.doc}"]
    for i, d in enumerate(schema.inputs_doc):
        lines.append(f"  input {i}: {d}")
    for i, d in enumerate(schema.outputs_doc):
        lines.append(f"  output {i}: {d}")
    for a in schema.args.values():
        default = "required" if a.required else f"default {a.default!r}"
        choices = f", one of {list(a.choices)}" if a.choices else ""
        lines.append(f"  arg {a.name}: {_type_text(a.type)} ({default}{choices}) {a.doc}".rstrip())
    return "\n".join(lines)


def _type_text(t: type | tuple[type, ...]) -> str:
    return " | ".join(x.__name__ for x in t) if isinstance(t, tuple) else t.__name__


def run(args: argparse.Namespace) -> int:
    if args.type:
        print(describe(get_schema(args.type)))
        return 0
    for schema in registered_ops().values():
        first = schema.doc.split("\n")[0]
        print(f"{schema.type:28s} {schema.arity_text():10s} {first}")
    return 0
