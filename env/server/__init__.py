"""The OpenEnv shell server of docs/spec/environment.md (built on openenv-core's
``create_app``).

Modules: ``models`` (action/observation schema), ``shell`` (one command as UID 2000),
``answer`` (reading answer.json safely), ``workspace`` (reset isolation),
``environment`` (the episode rules), ``app`` (the ASGI app uvicorn serves).
"""
