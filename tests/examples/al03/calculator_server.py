"""A calculator MCP server over stdio (the ``calculate`` tool of ``mcp-server-calculator``, which AL's calc_x
example starts with ``uvx``): arithmetic on numbers only, evaluated from the expression's syntax tree."""

from __future__ import annotations

import ast
import operator

from mcp.server.fastmcp import FastMCP  # mcp 1.x, which autogen-ext 0.7.5's MCP tools need

OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}

server = FastMCP("calculator")


def evaluate(node: ast.AST) -> float:
    """The value of an arithmetic expression tree; ValueError for anything else."""
    match node:
        case ast.Expression(body=body):
            return evaluate(body)
        case ast.Constant(value=int() | float() as value):
            return value
        case ast.BinOp(left=left, op=op, right=right) if type(op) in OPERATORS:
            return OPERATORS[type(op)](evaluate(left), evaluate(right))
        case ast.UnaryOp(op=op, operand=operand) if type(op) in OPERATORS:
            return OPERATORS[type(op)](evaluate(operand))
    raise ValueError(f"not arithmetic: {ast.dump(node)[:80]}")


@server.tool()
def calculate(expression: str) -> str:
    """Calculates/evaluates the given expression."""
    return str(evaluate(ast.parse(expression, mode="eval")))


if __name__ == "__main__":
    server.run()
