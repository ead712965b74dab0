"""A minimal OpenEnv server built the way env/server builds its app (create_app over
FastAPI/uvicorn), used to check that the slim runtime lock is enough to serve, and to
report which distributions a running server has actually imported.

Standard library and openenv-core only: it runs inside venvs made from locks/runtime.txt.
"""

from __future__ import annotations

from openenv.core.env_server import Action, Environment, Observation, State, create_app
from probe_dists import loaded_distributions


class EchoAction(Action):
    text: str


class EchoObservation(Observation):
    echoed: str = ""


class EchoEnvironment(Environment):
    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id="probe", step_count=0)

    def reset(self, seed=None, episode_id=None, **kwargs) -> EchoObservation:
        self._state = State(episode_id=episode_id or "probe", step_count=0)
        return EchoObservation(echoed="ready", reward=0.0, done=False)

    def step(self, action: EchoAction, timeout_s=None, **kwargs) -> EchoObservation:
        self._state.step_count += 1
        return EchoObservation(echoed=action.text, reward=1.0, done=True)

    @property
    def state(self) -> State:
        return self._state


app = create_app(EchoEnvironment, EchoAction, EchoObservation, env_name="probe")


@app.get("/probe/distributions")
def _distributions() -> list[str]:
    return loaded_distributions()
