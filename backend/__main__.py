"""`python -m backend` entry point; the commands live in backend/cli/main.py."""

from backend.cli.main import main

raise SystemExit(main())
