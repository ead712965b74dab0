"""Registry: moving images in and out of OCI registries.

`client` (the distribution HTTP API: references, auth, blobs, manifests), `local`
(the loopback docker-registry behind nginx), `push` (a layout into a registry), `pull`
(anonymous pull with every blob verified) and `basesource` (the base a build reads, by
digest: from a registry or an OCI layout).
"""
