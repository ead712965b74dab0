"""Image: the daemonless, deterministic build of the OCI image.

`oci/` (digests, deterministic layers, image config and manifest, OCI layouts),
`base` (the local base image, mmdebstrap + slim runtime), `basesource` (where a base
is read from: a registry or a layout), `payload` (the application layers),
`imageconfig` (the config values), `build` (base + layers + config -> a layout) and
`layerdiff` (what a layer holds, to explain differences).
"""
