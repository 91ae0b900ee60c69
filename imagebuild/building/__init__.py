"""Stage 3, build: build folders in, images out.

`builder` builds a rendered folder (BuildKit through the docker CLI, or the SDK's classic builder) after
`artifacts` has staged every pinned download, verified; `contenthash`, `baseid`, `context`, `dockerbuild`,
`registryhit`, `options` and `reporters` are its parts (the tags, the base, what docker receives, one build,
the registry skip, a run's inputs and results, the displays); `buildkit`, `bake` and `shard` are the BuildKit
driver, the docker-bake file and `--shard`; `summary` owns build/summary.json. `localbase` and `dlcbase` make
the local and the DLC-layout bases; `inspect_base` (with `inspect_probe`) reads what an existing base holds.
"""
