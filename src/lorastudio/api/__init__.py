"""The JSON API (FastAPI): thin routes over the job service, the run store and the data package.
Nothing here imports torch. `create_app` in app.py builds the application."""
