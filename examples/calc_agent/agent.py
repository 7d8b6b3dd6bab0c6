"""A calculator agent in Agent Lightning 0.3's style; voltbus runs it with only the import swapped.

The "model" here is a deterministic solver so the example runs anywhere in seconds; the agent uses
the resources (prompt template, LLM), the emitters and the reward exactly as an AL agent does.
Later examples replace the solver with a real model behind the gateway.
"""

from __future__ import annotations

import ast
import operator
from typing import Any

import voltbus as agl  # was: import agentlightning as agl

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def calculate(expression: str) -> float:
    """Evaluate + - * / over numbers (the agent's tool)."""

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        raise ValueError(f"unsupported expression: {expression}")

    return walk(ast.parse(expression, mode="eval").body)


class CalcAgent(agl.LitAgent[dict[str, Any]]):
    """Answers an arithmetic question with the calculator tool; reward 1 for a right answer."""

    async def training_rollout_async(
        self, task: dict[str, Any], resources: agl.NamedResources, rollout: agl.Rollout
    ) -> None:
        prompt = resources["prompt"].format(question=task["question"])  # type: ignore[union-attr]
        agl.emit_message(prompt)
        answer = calculate(task["question"])
        agl.emit_object({"tool": "calculate", "answer": answer})
        agl.emit_reward(1.0 if abs(answer - float(task["answer"])) < 1e-9 else 0.0)

    async def validation_rollout_async(
        self, task: dict[str, Any], resources: agl.NamedResources, rollout: agl.Rollout
    ) -> None:
        await self.training_rollout_async(task, resources, rollout)


agent = CalcAgent()
