"""Records: what a release says about itself, signed.

`provenance` (what went in), `sbom` (CycloneDX of the image's layers) and
`sbom_licenses` (its components' licences, as the image states them), `attest`
(in-toto statements, DSSE), `signing` (key and sigstore signers), `trust` (pinned
trust roots), `links` (in-toto stage links), `statement` (the release statement
that binds every record), `submission` (submission.json), `vsa` (the verification
summary an audit writes).
"""
