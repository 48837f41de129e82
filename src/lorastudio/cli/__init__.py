"""The `lorastudio` command line (typer). Each command group lives in its own module and is
registered in cli/app.py."""
