"""Training jobs, away from HTTP: the job service (one GPU job at a time, a queue behind it), the
worker subprocess (the only importer of the training engine), the run store (SQLite) and the GPU
arbiter. Import the submodules directly; this package imports nothing heavy."""
