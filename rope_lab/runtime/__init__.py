"""Process plumbing: atomic writes, the glibc allocator settings, XLA options, phase timing."""
