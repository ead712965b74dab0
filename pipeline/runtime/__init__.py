"""Runtime: running the built image on this host (the verifying is pipeline.checks.run's).

`runtime` (the docker/podman CLI adapter), `dockerd` (the private Docker engine),
`limits` (the container limits the runtime applies), `serve` (serve an image in a
container, or on the host), `hosttools` (the host tools a release needs).
"""
