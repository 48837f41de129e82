"""`python -m lorastudio ...`: the `lorastudio` console program run by module, as
`python -m lorastudio.cli` (cli/__main__.py) is; for a venv whose bin/ is not on PATH."""

from lorastudio.cli.app import main

main()
