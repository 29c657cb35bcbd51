"""One agent inside your own FastAPI app, as a router that shows in /docs.

    pip install -e '.[fastapi]'
    hypercorn examples.mounting.fastapi_app:app --bind 127.0.0.1:8000

Agent a answers at http://127.0.0.1:8000/agents/a; its routes are listed at
http://127.0.0.1:8000/docs under "A2A: a". include_router merges the router's lifespan into the
app's, so the app starts and stops the agent.
"""

from pathlib import Path

from fastapi import FastAPI

from harness_asgi.fastapi import harness_router
from harness_core import Harness, load_settings

HERE = Path(__file__).parent

a = Harness(load_settings(HERE / "a.toml"), prefix="/agents/a")

app = FastAPI(title="My app")


@app.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


app.include_router(harness_router(a))  # no prefix here: it is the harness's own
