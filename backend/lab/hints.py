"""The command lines the dashboard and the command line suggest to fill an empty page. Each is shown
as written and must work pasted into a shell in the checkout with nothing set by hand: the command
finds the worker `make run` started (its URL is published beside the store) and the shipped suite.
tests/pages/test_hints.py runs every one of them, and every command the pages' source shows."""

# drafters x D x batch sizes on one prompt per suite category: Pareto, Acceptance
SWEEP_HINT = (
    "python -m backend bench sweep --drafters ngram,suffix --draft-lens 0,4,8 --batch-sizes 1,4 --per-category 1"
)
# plain decoding and one drafter at batch size 1 and more: the measured curve on Co-design
CODESIGN_HINT = "python -m backend bench sweep --drafters ngram --draft-lens 0,2,4,8 --batch-sizes 1,4 --per-category 1"
# the lookup drafters' chains and token trees at one D: AL vs tree budget on Acceptance
TREE_SWEEP_HINT = (
    "python -m backend bench sweep --drafters ngram,suffix --draft-lens 4 --tree-budgets 0,8,16 --batch-sizes 1 "
    "--per-category 1"
)

HINTS = (SWEEP_HINT, CODESIGN_HINT, TREE_SWEEP_HINT)
