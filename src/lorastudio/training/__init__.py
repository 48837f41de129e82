"""The family-agnostic training engine. Import `lorastudio.training.loop.train` to run one;
this package's __init__ stays free of torch so the job service can use `training.events`."""
