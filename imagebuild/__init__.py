"""Host-side build logic: matrix -> variants -> Dockerfiles -> images -> checks -> registries."""
