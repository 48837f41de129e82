"""`python -m lorastudio.cli ...` (e.g. under torchrun: `torchrun --nproc_per_node 2 -m lorastudio.cli train cfg.toml`)."""

from lorastudio.cli.app import main

main()
