"""Registry: moving images in and out of OCI registries.

`client` (the distribution HTTP API: references, auth, blobs, manifests), `local`
(the loopback docker-registry behind nginx), `push` (a layout into a registry) and
`pull` (anonymous pull with every blob verified).
"""
