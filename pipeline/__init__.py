"""Release machinery for the OpenEnv data-workflow environment image.

One module per concern; data flows one way:
config -> sources -> build -> sbom/attest -> publish -> verify -> records.
"""

__version__ = "0.1.0"
