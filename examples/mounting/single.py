"""One agent served on its own by Hypercorn: the app starts the agent from its lifespan.

hypercorn examples.mounting.single:app --bind 127.0.0.1:8000
"""

from pathlib import Path

from harness_core import Harness, load_settings

app = Harness(load_settings(Path(__file__).parent / "a.toml")).asgi_app()
