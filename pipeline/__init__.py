"""Release machinery for the OpenEnv data-workflow environment image.

The packages are the stages, and data flows one way: each floor of `LAYERS` imports
only from its own floor or the floors below (tests/test_layers.py enforces it).

    cli, commands/, __main__           one CLI: every command registered in pipeline.cli
    release, reproduce, audit/, plan,  orchestration: resolve the profile once, call the stages,
    basestage, inputs, diff            push the layouts the image stage returns, find the image-input commit,
                                       compare two releases
    records/                           provenance, SBOM, statements, signing, submission (the request),
                                       its admission preflight, sizes, VSA, the dataset folder (card,
                                       tasks.jsonl) and its Hub publication
    checks/                            the functional suite and its independent solvers
    runtime/                           container runtime adapter, the private Docker engine, limits,
                                       serve, host tools
    registry/                          client (HTTP API), local registry, push, pull, base source
    image/                             base, payload, config, build, layer diff (into layouts)
    sources/                           git, vendored files, dataset records, wheel lock
    image/oci/                         OCI formats: digests, layers, config/manifest, layouts, an image's
                                       files read from its layers
    config, configschema, curriculum,  shared by every floor (config: the one typed model of
    errors, formats, imageref,         release.toml and trust.toml; configschema: its page;
    progress, runs, _daemon, _io,      curriculum: [curriculum] and its cases in request order;
    _proc                              _daemon: servers started and stopped by PID;
                                       imageref: image references and the sha256 pattern;
                                       runs: who owns what a run left, the test pause hook)
"""

from pipeline._project import VERSION

__version__ = VERSION  # pyproject.toml's

# Lowest floor first. A module belongs to the floor of the longest prefix naming it.
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "pipeline",
        "pipeline.config",
        "pipeline.configschema",
        "pipeline.curriculum",
        "pipeline.errors",
        "pipeline.formats",
        "pipeline.imageref",
        "pipeline.progress",
        "pipeline.runs",
        "pipeline._daemon",
        "pipeline._io",
        "pipeline._proc",
    ),
    ("pipeline.image.oci",),
    ("pipeline.sources",),
    ("pipeline.image",),
    ("pipeline.registry",),
    ("pipeline.runtime",),
    ("pipeline.checks",),
    ("pipeline.records",),
    (
        "pipeline.release",
        "pipeline.reproduce",
        "pipeline.audit",
        "pipeline.plan",
        "pipeline.basestage",
        "pipeline.inputs",
        "pipeline.diff",
    ),
    ("pipeline.cli", "pipeline.commands", "pipeline.__main__"),
)
