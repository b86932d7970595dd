"""`python -m backend ARGS` run in the test's own process: the same `main` a subprocess would run, without
the seconds a new process spends importing torch and transformers (about 7 on a 2-core CPU). For commands
that only parse, refuse bad input or print help; tests of what a pasted command does end to end keep real
subprocesses."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from backend.cli.main import main


@dataclass(frozen=True)
class Ran:
    status: int  # the exit status the process would have had
    stdout: str
    stderr: str

    @property
    def last_error(self) -> str:
        """The line a refusal ends with (`error: ...`), after argparse's usage lines where argparse refused."""
        lines = self.stderr.strip().splitlines()
        return lines[-1] if lines else ""


def run_main(args: list[str], capsys: pytest.CaptureFixture[str]) -> Ran:
    """Run the command line `args`; argparse's own exits (--help, a flag it rejects) give their status. What the
    test printed before is left out of the result."""
    capsys.readouterr()
    try:
        status = main(args)
    except SystemExit as exit_:
        status = exit_.code if isinstance(exit_.code, int) else 1
    captured = capsys.readouterr()
    return Ran(status, captured.out, captured.err)
