"""Applications on the library: the `het-tf` command (train, bench, launch,
server, info) and the link emulation. Nothing in the library imports them."""
