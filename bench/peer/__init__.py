"""A peer trainer measured beside ours (issue 31 item 4): the peer's own source, exported by
fetch_musubi.sh into the ignored .peer/ folder, driven by musubi_run.py; bench/peer_musubi.py
runs it and our bench.probe_speed rows in one GPU call."""
