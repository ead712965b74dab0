"""Checks: the functional suite of docs/spec/verification.md, run against live servers.

`suite` runs the cases (`cases`, `case_checks`, `image_checks`, `limit_checks`,
`repair`) on `target`s through `client`; `results`, `shards`, `merge` and `report`
hold and combine the outcome; `external` checks the external tasks' images;
`run` is the API the `verify` and `checks` commands call (verify_image, target_for). `solvers/` holds one
solver per task family, written independently of env/families on purpose: a check
that reused the environment's own code would agree with any bug in it, so the
duplication is the point and must be kept.
"""
