"""Stage 5, release: checked images in, digests in registries and release records out.

`push` pushes with the docker engine by digest; `destinations` names where images go (a registry, ECR);
`record` is the release gate (check and pre-flight reports), the release record and its notes; `promote`
puts a gated digest under its release tags and channels, byte for byte; `channels` says when a channel
may move and carries its history; `prune` finds the content tags nothing names any more. The registry and
ECR clients are adapters.
"""
