"""What the token-tree tests share: a prompt on which lookup drafters' trees branch, and whether a
tree step kept a branch other than its first."""

from __future__ import annotations

from backend.core.tree_shape import children

# "4 5" was followed by 6, 7 and 8: lookup drafters' token trees branch on it
BRANCHING = [4, 5, 6, 4, 5, 7, 4, 5, 8, 4, 5]


def later_sibling_accepted(step) -> bool:
    """Whether the step kept a node that is not its parent's first child."""
    below = children(step.parents)
    return any(below[step.parents[node] + 1][0] != node for node in step.accepted_path)
