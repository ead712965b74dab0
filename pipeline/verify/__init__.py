"""Verify: running the built image on this host.

`runtime` (the docker/podman CLI adapter), `limits` (the container limits the runtime
applies), `serve` (serve an image in a container, or on the host), `hosttools` (the
host tools a release needs).
"""
