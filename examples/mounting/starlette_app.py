"""Two agents inside your own Starlette app.

    hypercorn examples.mounting.starlette_app:app --bind 127.0.0.1:8000

Then: the host's page at http://127.0.0.1:8000/, agent a at http://127.0.0.1:8000/agents/a (its card at
/agents/a/.well-known/agent-card.json), agent b at /agents/b. The app's lifespan starts both agents
(in order) and stops them (in reverse); until they are ready they answer 503.
"""

from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from harness_core import Harness, harnesses_lifespan, load_settings

HERE = Path(__file__).parent

a = Harness(load_settings(HERE / "a.toml"), prefix="/agents/a")
b = Harness(load_settings(HERE / "b.toml"), prefix="/agents/b")


async def home(request: Request) -> JSONResponse:
    return JSONResponse({"agents": [a.public_url, b.public_url]})


app = Starlette(
    routes=[
        Route("/", home),
        Mount("/agents/a", app=a.asgi_app()),
        Mount("/agents/b", app=b.asgi_app()),
    ],
    lifespan=harnesses_lifespan(a, b),
)
