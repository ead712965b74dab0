"""Image: the daemonless, deterministic build of the OCI image, into a layout.

`oci/` (digests, deterministic layers, image config and manifest, OCI layouts: the
format floor every other package may use), `base` (the local base image: mmdebstrap +
slim runtime, built into a layout, pinned in locks/base.json), `payload` (the
application layers), `imageconfig` (the config values), `build` (a handed base +
layers + config -> a layout) and `layerdiff` (what a layer holds, to explain
differences). Nothing here talks to a registry: the orchestration hands the build a
base to read and pushes the layouts it returns.
"""
