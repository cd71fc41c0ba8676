"""Process plumbing: atomic writes, the glibc allocator settings, XLA options, phase timing,
compiled programs freed before the memory maps run out."""
