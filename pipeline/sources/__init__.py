"""Sources: everything the release takes in, pinned and hash-checked.

`git` (the project checkout and pinned upstream repositories), `vendor` (pinned
upstream files fetched and vendored with their licences), `dataset` (external task
records from the pinned dataset), `lock` (the hash-pinned runtime wheel lock).
Nothing here knows about images, registries or records.
"""
