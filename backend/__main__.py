"""`python -m backend` entry point; the commands live in backend/cli.py."""

from backend.cli import main

raise SystemExit(main())
