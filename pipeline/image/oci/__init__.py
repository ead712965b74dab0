"""OCI images as data: digests, deterministic layers, config/manifest, layouts."""
