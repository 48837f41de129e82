"""What makes a run resumable exactly: checkpoints and their atomic writes, the loop's state
(snapshot), the run's identity (what changes its maths), the machine it ran on, moved folders,
its losses record, and the run folder's lock, mark and file list."""
