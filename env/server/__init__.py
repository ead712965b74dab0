"""The OpenEnv shell server of environment.md (built on openenv-core's ``create_app``).

Modules: ``models`` (action/observation schema), ``shell`` (one command as UID 2000),
``answer`` (reading answer.json safely), ``workspace`` (reset isolation),
``environment`` (the episode rules), ``app`` (the ASGI app uvicorn serves).
"""

from env.server import _slim_openenv

# Before anything below imports openenv.core (see _slim_openenv for why).
_slim_openenv.install()
